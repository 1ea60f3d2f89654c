"""``morl prompt`` end to end: runs on a tiny random BERT and on the packaged MiniLM, the
baselines, and one-line errors that write nothing."""

import json
from pathlib import Path

import pytest

from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def morl_prompt(*argv):
    return morl(["prompt", *argv, "--no-progress"])


def test_cli_trains_end_to_end_on_a_tiny_encoder(tmp_path):
    rc = morl_prompt(
        str(CONFIGS / "prompt_most.yaml"),
        "encoder=tiny",
        "steps=6",
        "batch_size=24",
        "eval_every=3",
        "checkpoint_every=3",
        "data.options={train: 96, val: 32, test: 48}",
        "dispatcher.steps=50",
        f"out_dir={tmp_path}",
    )
    assert rc == 0
    (run,) = tmp_path.iterdir()
    final = json.loads((run / "final_metrics.json").read_text())
    assert final["method"] == "most" and len(final["test"]["prompt_acc"]) == 3
    assert min(final["train"]["assignment_share"]) > 0.2  # balanced, non-trivial mixture
    assert 0.0 <= final["test"]["routed_acc"] <= final["test"]["oracle_acc"] <= 1.0
    assert sum(final["test"]["route_share"]) == pytest.approx(1.0)
    state = torch_load(run / "checkpoints" / "last.pt")
    assert state["step"] == 6 and state["mixture"]["prompts"].shape == (3, 4, 32) and "dispatcher" in state
    assert list((run / "tb").glob("events.out.tfevents.*"))
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "eval"] == [3, 6]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3, 4, 5, 6]  # log_every = 1


@pytest.mark.parametrize("method", ["mgda", "linear"])
def test_cli_baselines_run(tmp_path, method):
    rc = morl_prompt(
        str(CONFIGS / f"prompt_{method}.yaml"),
        "encoder=tiny",
        "steps=2",
        "batch_size=16",
        "data.options={train: 48, val: 16, test: 16}",
        "dispatcher.steps=10",
        f"out_dir={tmp_path}",
    )
    assert rc == 0
    (run,) = tmp_path.iterdir()
    assert json.loads((run / "final_metrics.json").read_text())["method"] == method


@pytest.mark.integration  # loads the packaged MiniLM encoder
def test_cli_trains_with_the_packaged_minilm(tmp_path):
    rc = morl_prompt(
        str(CONFIGS / "prompt_most.yaml"),
        "steps=2",
        "batch_size=12",
        "eval_every=2",
        "data.options={train: 36, val: 12, test: 12}",
        "dispatcher.steps=10",
        "max_length=16",
        f"out_dir={tmp_path}",
    )
    assert rc == 0
    (run,) = tmp_path.iterdir()
    state = torch_load(run / "checkpoints" / "last.pt")
    assert state["mixture"]["prompts"].shape == (3, 4, 384)  # MiniLM's hidden size


@pytest.mark.parametrize(
    "override,match",
    [
        ("encoder=/no/such/model", "encoder '/no/such/model' is not a local folder"),
        ("data.name=file", "must be file paths, got 240"),
        ("data.options={train: /no/such.jsonl}", "does not exist"),
        ("method=adam", "method"),
        ("batch_size=100000", "exceeds"),
    ],
)
def test_bad_input_gives_one_line_error_and_writes_nothing(tmp_path, capsys, override, match):
    extra = ["data.name=file"] if override.startswith("data.options") else []
    rc = morl_prompt(str(CONFIGS / "prompt_most.yaml"), "encoder=tiny", override, *extra, f"out_dir={tmp_path}")
    err = capsys.readouterr().err.strip()
    assert rc == 2 and match in err and len(err.splitlines()) == 1 and err.startswith("morl: error:")
    assert not any(tmp_path.iterdir())
