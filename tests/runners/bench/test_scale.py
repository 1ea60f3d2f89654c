"""``morl bench scale``: the models have the sizes the docs quote and every cell reports a time and a
peak relative to the plain step."""

import json

import pytest

from morl.runners.bench import scale
from morl.runners.cli import main


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_full_models_have_about_36m_shared_parameters(model):
    trunk, heads, x, y = scale.build(model, quick=False, k=3)
    d = sum(p.numel() for p in trunk.parameters())
    assert 34e6 < d < 38e6
    assert len(heads) == 3 and y.shape == (x.shape[0], 3)


def _check_cells(rows, methods):
    assert [r["method"] for r in rows] == list(methods)
    for r in rows:
        assert "error" not in r, r
        assert r["seconds"] > 0 and r["peak_bytes"] >= 0 and r["threads"] >= 1
        assert r["time_ratio"] == pytest.approx(r["seconds"] / rows[0]["seconds"])
    assert rows[0]["time_ratio"] == 1.0


def test_quick_cells_report_time_and_memory_relative_to_plain():
    methods = ("plain", "gramian", "features")
    rows = scale.measure(True, ks=(2,), models=("mlp", "cnn"), methods=methods)
    _check_cells(rows[:3], methods)
    _check_cells(rows[3:], methods)
    table = scale.format_table(rows)
    assert "| mlp |" in table and "| cnn |" in table and "gramian" in table and "× plain" in table


def test_ks_and_methods_choose_the_cells_and_bad_values_get_one_line(tmp_path, capsys):
    """``--ks 3 --methods plain,gramian:2``: those cells only, the chunked tape among them."""
    out = tmp_path / "scale.json"
    assert main(["bench", "scale", "--quick", "--ks", "3", "--methods", "plain,gramian:2", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["model"], r["k"], r["method"]) for r in rows] == [
        (m, 3, method) for m in ("mlp", "cnn") for method in ("plain", "gramian:2")
    ]
    assert all("error" not in r for r in rows)
    capsys.readouterr()
    for option, bad in (("--ks", "1"), ("--ks", "x"), ("--methods", "gramian:0"), ("--methods", "nope")):
        assert main(["bench", "scale", "--quick", option, bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and option in err and repr(bad) in err, err


def test_a_cell_in_a_fresh_process_reports_its_peak():
    rows = scale.measure(True, ks=(2,), models=("mlp",), methods=("plain", "gramian"), fresh=True)
    _check_cells(rows, ("plain", "gramian"))
    assert rows[1]["memory_ratio"] is None or rows[1]["memory_ratio"] >= 0


def test_rows_cells_too_big_for_memory_are_skipped_not_run():
    rows = scale.measure(True, ks=(2,), models=("mlp",), methods=("rows",), max_gb=1e-6)
    assert rows[0]["error"].startswith("skipped: [K, D] matrix")
