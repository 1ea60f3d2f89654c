"""`morl report` reads RL, supervised, FORUM and FL run directories and labels sweep cells by what varies."""

import json

import numpy as np

from morl.runners.report.collect import collect
from tests.runners.report.report_runs import STEPS, TASKS, write_rl_run

# -- reading runs --------------------------------------------------------------------------


def test_collect_reads_a_run_without_run_json(tmp_path):
    success = np.array([[0.0, 0.25, 0.5, 0.0], [0.5, 0.5, 0.75, 0.25], [1.0, 0.75, 1.0, 0.5]])
    write_rl_run(tmp_path / "old", "cagrad", 3, success, run_json=False, final_json=False)
    (run,), _, notes = collect([tmp_path / "old"])
    assert (run.kind, run.label, run.seed, run.tasks) == ("rl", "cagrad", 3, TASKS)
    assert run.steps.tolist() == STEPS and run.final.tolist() == success[-1].tolist() and run.final_step == 300
    assert run.series["weights"].columns == TASKS and run.series["conflicts"].values.shape == (6, 3)
    assert notes == []


def test_collect_reads_a_supervised_run_by_its_config_keys(tmp_path):
    run_dir = tmp_path / "sup"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(
        "name: digits_mean\nseed: 2\nepochs: 10\ndata: {name: digits}\naggregator: {name: mgda}\n"
    )
    test = {"digit/loss": 0.2, "parity/loss": 0.1, "digit/accuracy": 0.9, "parity/accuracy": 0.95}
    (run_dir / "metrics.jsonl").write_text(
        json.dumps({"step": 5, "time": 0, "epoch": 5, "test": {**test, "digit/accuracy": 0.8}})
        + "\n"
        + json.dumps({"step": 10, "time": 0, "epoch": 10, "test": test})
        + "\n"
    )
    (run_dir / "final_metrics.json").write_text(
        json.dumps({"epoch": 10, "test": test, "directions": {"digit/accuracy": True, "parity/accuracy": True}})
    )
    (run,), _, _ = collect([run_dir])
    assert (run.kind, run.label, run.seed, run.metric.name, run.metric.best) == (
        "supervised",
        "mgda",
        2,
        "test/accuracy",
        1.0,
    )
    assert (
        run.tasks == ["digit", "parity"]
        and run.final.tolist() == [0.9, 0.95]
        and run.curve[:, 0].tolist() == [0.8, 0.9]
    )


def test_collect_puts_forum_records_on_the_percent_scale_of_its_final_metrics(tmp_path):
    run_dir = tmp_path / "forum"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("name: f\nseed: 1\nproblem: mtl\nforum: {rho: 0.1}\n")
    records = [
        {"step": k, "time": 0, "kind": "eval", "test": {"a/accuracy": acc, "b/accuracy": 0.5}}
        for k, acc in ((20, 0.75), (40, 0.25))
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run_dir / "final_metrics.json").write_text(
        json.dumps(
            {
                "forum": {"a/accuracy": 25.0, "b/accuracy": 50.0, "a/loss": 1.0},
                "equal_weights": {"a/accuracy": 90.0, "b/accuracy": 90.0},
            }
        )
    )
    (run,), _, _ = collect([run_dir])
    assert (run.kind, run.label, run.metric.name, run.metric.best) == ("forum", "mtl", "test/accuracy", 100.0)
    assert run.final.tolist() == [25.0, 50.0] and run.curve.tolist() == [[75.0, 50.0], [25.0, 50.0]]


def test_collect_reads_an_fl_run_and_its_final_row(tmp_path):
    run_dir = tmp_path / "fl"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(
        "name: f\nstrategy: {name: fedavg}\nengine: {name: inprocess}\ntrain: {seed: 4}\n"
    )
    rows = [
        {"step": r, "time": 0, "kind": "eval", "test_mean": acc, "model_share": [3, 2]}
        for r, acc in ((10, 0.6), (20, 0.8))
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "final_metrics.json").write_text(
        json.dumps({"final": {"round": 20, "test_mean": 0.8}, "best_val": {"round": 10, "test_mean": 0.6}})
    )
    (run,), _, _ = collect([run_dir])
    assert (run.kind, run.label, run.seed, run.tasks, run.final.tolist(), run.final_step) == (
        "fl",
        "fedavg",
        4,
        ["all"],
        [0.8],
        20,
    )
    assert run.curve[:, 0].tolist() == [0.6, 0.8] and run.metric.best == 1.0


def test_sweep_labels_name_what_varies(tmp_path):
    success = np.full((len(STEPS), len(TASKS)), 0.5)
    groups = [
        {"aggregator.name": "mean", "run.device": "cpu"},
        {"aggregator.name": "cagrad", "aggregator.options": {"c": 0.5}, "run.device": "cpu"},
        {"aggregator.name": "mgda", "aggregator.options": {}, "run.device": "cpu"},
    ]
    for i, group in enumerate(groups):
        write_rl_run(tmp_path / f"r{i}", group["aggregator.name"], 0, success)
    cells = [{"name": f"r{i}", "run_dir": f"r{i}", "group": g, "seed": 0} for i, g in enumerate(groups)]
    not_started = {"name": "r9", "run_dir": "r9", "group": {"aggregator.name": "mgda", "run.device": "cpu"}, "seed": 1}
    (tmp_path / "manifest.json").write_text(json.dumps({"cells": [*cells, not_started]}))
    runs, sweep, notes = collect([tmp_path])
    assert [r.label for r in runs] == ["mean", "cagrad, c=0.5", "mgda"] and sweep == tmp_path
    assert notes == [f"r9: not started (no {tmp_path}/r9/config.yaml), left out"]
