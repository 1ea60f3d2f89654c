"""`morl report` end to end: a sweep's report equals an independent computation; bad input is one line."""

import csv
import json

import numpy as np
import pytest
import scipy.stats

from morl.runners import cli
from tests.runners.report.report_runs import STEPS, TASKS, write_rl_run, write_sweep

# -- the command end to end ----------------------------------------------------------------


def _report(argv, capsys):
    code = cli.main(["report", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_report_on_a_sweep_equals_an_independent_computation(tmp_path, capsys):
    sweep, tables = write_sweep(tmp_path / "sweep", {"cagrad": 0.3, "mgda": 0.1}, seeds=[0, 1, 2])
    code, out, err = _report([str(sweep), "--reps", "500", "--no-plots"], capsys)
    assert code == 0, err
    report = json.loads((sweep / "report" / "report.json").read_text())
    by_method = {m["method"]: m for m in report["methods"]}
    assert list(by_method) == ["cagrad", "mgda"] and report["metric"] == "eval/success"
    for name, table in tables.items():  # table: [seeds, steps, tasks]
        m, final = by_method[name], table[:, -1, :]
        assert m["runs"] == 3 and m["seeds"] == [0, 1, 2]
        assert m["final"]["mean"]["value"] == pytest.approx(final.mean())
        assert m["final"]["iqm"]["value"] == pytest.approx(scipy.stats.trim_mean(final.ravel(), 0.25))
        assert m["final"]["median"]["value"] == pytest.approx(np.median(final.mean(axis=0)))
        assert m["best_over_training"]["mean"]["value"] == pytest.approx(table.mean(axis=2).max(axis=1).mean())
        for j, task in enumerate(TASKS):
            assert m["per_task"][task]["value"] == pytest.approx(final[:, j].mean())
        for entry in (m["final"]["mean"], m["final"]["iqm"], m["best_over_training"]["mean"]):
            assert entry["ci"][0] <= entry["value"] <= entry["ci"][1]
    x, y = tables["cagrad"][:, -1, :], tables["mgda"][:, -1, :]
    expected = np.mean([scipy.stats.mannwhitneyu(x[:, t], y[:, t]).statistic / 9 for t in range(len(TASKS))])
    pair = next(p for p in report["probability_of_improvement"] if (p["x"], p["y"]) == ("cagrad", "mgda"))
    assert pair["value"] == pytest.approx(expected)
    # the printed table carries the same numbers, formatted
    assert f"| cagrad | 3 | {by_method['cagrad']['final']['mean']['value']:.3f} [" in out
    rows = list(csv.DictReader((sweep / "report" / "report.csv").open()))
    assert any(
        r["method"] == "mgda"
        and r["statistic"] == "iqm"
        and float(r["value"]) == pytest.approx(by_method["mgda"]["final"]["iqm"]["value"])
        for r in rows
    )
    records = list(csv.DictReader((sweep / "report" / "records.csv").open()))
    assert len(records) == 6 * len(TASKS) * (len(STEPS) + 1)  # every eval point plus the final value
    assert "| task | cagrad | mgda |" in (sweep / "report" / "report.md").read_text()


def test_report_groups_run_dirs_by_config_keys(tmp_path, capsys):
    sweep, _ = write_sweep(tmp_path / "sweep", {"cagrad": 0.3, "mgda": 0.1}, seeds=[0, 1])
    runs = sorted(str(p) for p in (sweep / "runs").iterdir())
    code, out, err = _report(
        [*runs, "--out", str(tmp_path / "r"), "--group-by", "run.seed", "--reps", "200", "--no-plots"], capsys
    )
    assert code == 0, err
    methods = json.loads((tmp_path / "r" / "report.json").read_text())["methods"]
    assert [(m["method"], m["runs"]) for m in methods] == [("0", 2), ("1", 2)]


def test_report_notes_unfinished_and_single_runs(tmp_path, capsys):
    success = np.full((len(STEPS), len(TASKS)), 0.5)
    write_rl_run(tmp_path / "a", "cagrad", 0, success, status="interrupted")
    code, out, err = _report([str(tmp_path / "a"), "--out", str(tmp_path / "r"), "--reps", "100", "--no-plots"], capsys)
    assert code == 0, err
    assert "cagrad: 1 interrupted of 1 runs" in out and "one run" in out


@pytest.mark.parametrize("make, argv, message", [
    (lambda p: None, ["{p}/missing"], "does not exist"),
    (lambda p: (p / "empty").mkdir(), ["{p}/empty"], "is not a run directory (no config.yaml) nor a sweep directory"),
    (lambda p: (p / "bad").mkdir() or (p / "bad" / "config.yaml").write_text("a: [1,"), ["{p}/bad"], "config.yaml' is not valid YAML"),
    (lambda p: (p / "sweep").mkdir() or (p / "sweep" / "manifest.json").write_text("{}"), ["{p}/sweep"], "has no list 'cells'"),
    (lambda p: write_rl_run(p / "run", "mgda", 0, np.zeros((3, 4))), ["{p}/run", "--metric", "eval/sucess"], "has no metric 'eval/sucess'; its records offer: "),
    (lambda p: write_rl_run(p / "run", "mgda", 0, np.zeros((3, 4))), ["{p}/run", "--reps", "5"], "--reps 5: give between 100"),
    (lambda p: write_rl_run(p / "run", "mgda", 0, np.zeros((3, 4))), ["{p}/run", "--group-by", "agent.lr"], "--group-by agent.lr: not a key"),
])  # fmt: skip
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, make, argv, message):
    make(tmp_path)
    code, out, err = _report([a.format(p=tmp_path) for a in argv] + ["--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("morl: error: ") and message in err
    assert not (tmp_path / "out").exists()


def test_unknown_metric_error_names_the_allowed_ones(tmp_path, capsys):
    write_rl_run(tmp_path / "run", "mgda", 0, np.zeros((3, 4)))
    _, _, err = _report([str(tmp_path / "run"), "--metric", "nope", "--out", str(tmp_path / "out")], capsys)
    assert "eval/success" in err and "grad/cos_min" in err
