"""`morl report --baseline GROUP`: Δm% per seed against the baseline's run of the same seed, on
fixed supervised runs whose Δm is computed here by hand."""

from __future__ import annotations

import json

import pytest

from morl.runners import cli

# test MSE per (method, seed) for tasks a and b; the hand Δm% of mgda against mean per seed:
#   s0: 50 * ((0.03 - 0.02) / 0.02 + (0.04 - 0.04) / 0.04) = +25
#   s1: 50 * ((0.025 - 0.025) / 0.025 + (0.025 - 0.05) / 0.05) = -25
#   s2: 50 * ((0.011 - 0.01) / 0.01 + (0.022 - 0.02) / 0.02) = +10
MSE = {
    "mean": {0: (0.02, 0.04), 1: (0.025, 0.05), 2: (0.01, 0.02)},
    "mgda": {0: (0.03, 0.04), 1: (0.025, 0.025), 2: (0.011, 0.022)},
}
HAND = {0: 25.0, 1: -25.0, 2: 10.0}


def _supervised_run(path, aggregator, seed, values, metric="mse", higher=False):
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(
        f"name: r\nseed: {seed}\nepochs: 2\ndata: {{name: regression}}\naggregator: {{name: {aggregator}}}\n"
    )
    test = {f"{t}/{metric}": v for t, v in zip("ab", values)} | {f"{t}/loss": 9.0 for t in "ab"}
    (path / "metrics.jsonl").write_text(json.dumps({"step": 2, "time": 0, "epoch": 2, "test": test}) + "\n")
    directions = {f"{t}/{metric}": higher for t in "ab"}  # as morl supervised writes them: no losses
    (path / "final_metrics.json").write_text(json.dumps({"epoch": 2, "test": test, "directions": directions}))


def _sweep(root, table, metric="mse", higher=False):
    cells = []
    for method, seeds in table.items():
        for seed, values in seeds.items():
            name = f"{method}-s{seed}"
            _supervised_run(root / name, method, seed, values, metric, higher)
            cells.append({"name": name, "run_dir": name, "group": {"aggregator.name": method}, "seed": seed})
    (root / "manifest.json").write_text(json.dumps({"cells": cells}))
    return root


def _report(argv, capsys):
    code = cli.main(["report", *argv, "--no-plots", "--reps", "500"])
    out, err = capsys.readouterr()
    return code, out, err


def test_delta_m_per_seed_equals_the_hand_computation(tmp_path, capsys):
    sweep = _sweep(tmp_path / "sweep", MSE)
    code, out, err = _report([str(sweep), "--baseline", "mean"], capsys)
    assert code == 0, err
    report = json.loads((sweep / "report" / "report.json").read_text())
    (row,) = report["delta_m"]["methods"]
    assert report["delta_m"]["baseline"] == "mean" and row["method"] == "mgda" and row["seeds"] == [0, 1, 2]
    assert row["per_seed"] == pytest.approx([HAND[s] for s in (0, 1, 2)])
    assert row["value"] == pytest.approx(10.0 / 3)
    # a bootstrap mean of three values cannot leave their range, and 500 resamples reach both sides of the mean
    assert -25.0 <= row["ci"][0] < row["value"] < row["ci"][1] <= 25.0
    assert "| mgda | 3 | +3.33 [" in out and "+25.00 / -25.00 / +10.00 (seeds 0, 1, 2)" in out
    assert "--baseline mean" in (sweep / "report" / "report.md").read_text()
    csv_text = (sweep / "report" / "report.csv").read_text()
    assert f"delta_m,mgda,mean,,final,delta_m_percent,{row['value']}" in csv_text


def test_delta_m_follows_the_stored_directions(tmp_path, capsys):
    # accuracy, higher is better: task a up 10 % relative, task b unchanged -> Δm = -(10 + 0) / 2 = -5
    table = {"mean": {0: (0.8, 0.5)}, "mgda": {0: (0.88, 0.5)}}
    sweep = _sweep(tmp_path / "sweep", table, metric="accuracy", higher=True)
    code, _, err = _report([str(sweep), "--baseline", "mean"], capsys)
    assert code == 0, err
    (row,) = json.loads((sweep / "report" / "report.json").read_text())["delta_m"]["methods"]
    assert row["per_seed"] == pytest.approx([-5.0])


def test_a_seed_without_a_baseline_run_is_left_out_with_a_note(tmp_path, capsys):
    table = {"mean": {0: MSE["mean"][0], 1: MSE["mean"][1]}, "mgda": MSE["mgda"]}
    sweep = _sweep(tmp_path / "sweep", table)
    code, out, err = _report([str(sweep), "--baseline", "mean"], capsys)
    assert code == 0, err
    (row,) = json.loads((sweep / "report" / "report.json").read_text())["delta_m"]["methods"]
    assert row["seeds"] == [0, 1] and row["per_seed"] == pytest.approx([25.0, -25.0])
    assert "note: Δm%: mgda-s2 (seed 2) left out: mean has no run with that seed" in out


def test_an_unknown_baseline_is_one_line_and_writes_nothing(tmp_path, capsys):
    sweep = _sweep(tmp_path / "sweep", MSE)
    code, _, err = _report([str(sweep), "--baseline", "sgd"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "--baseline 'sgd' is not a method of this report; its methods are: mean, mgda" in err
    assert not (sweep / "report").exists()
