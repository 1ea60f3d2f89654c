"""The text tasks: the generated domain-flip task and the JSONL/CSV file loader."""

import json

import pytest

from morl.envs.data.text import generate_domain_flip, load_text_file


def test_generated_task_flips_the_attribute_rule_between_domains():
    a, b = generate_domain_flip(seed=3), generate_domain_flip(seed=3)
    assert a.texts == b.texts and a.labels == b.labels
    words = {0: {}, 1: {}}
    for text, y, d in zip(a.texts["train"], a.labels["train"], a.domains["train"]):
        if d in words:
            for w in ("long", "short", "hot", "cold"):
                if f" {w}" in text:
                    words[d].setdefault(w, set()).add(y)
    # every attribute word has one label per domain, and the opposite one in the other domain
    for w in ("long", "short", "hot", "cold"):
        assert len(words[0][w]) == 1 and words[0][w] == {1 - y for y in words[1][w]}
    assert 0.4 < sum(a.labels["test"]) / len(a.labels["test"]) < 0.6


def test_file_loader_reads_jsonl_and_csv_and_rejects_bad_files(tmp_path):
    rows = [{"text": f"sentence number {k}", "label": "pos" if k % 2 else "neg"} for k in range(40)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    data = load_text_file(str(tmp_path / "d.jsonl"), seed=0)
    assert data.label_names == ["neg", "pos"]
    assert sum(len(data.texts[s]) for s in data.texts) == 40 and len(data.texts["test"]) == 6
    (tmp_path / "d.csv").write_text("text,label\n" + "".join(f"row {k},{k % 3}\n" for k in range(30)))
    assert load_text_file(str(tmp_path / "d.csv")).num_classes == 3
    (tmp_path / "bad.csv").write_text("sentence,label\nhello,1\n")
    for path, match in ((tmp_path / "missing.jsonl", "does not exist"), (tmp_path / "bad.csv", "lacks a 'text'")):
        with pytest.raises(ValueError, match=match) as err:
            load_text_file(str(path))
        assert "\n" not in str(err.value)
