"""`morl report`: the statistics against independent computations (hand values, scipy, a plain
loop, rliable when installed), the bootstrap's coverage on a known distribution, and the command
end to end on synthetic run directories."""

import csv
import json

import numpy as np
import pytest
import scipy.stats

from morl.runners import cli
from morl.runners.report import stats
from morl.runners.report.collect import collect
from report_runs import STEPS, TASKS, write_rl_run, write_sweep

# -- aggregates ----------------------------------------------------------------------------


def test_iqm_by_hand():
    # 8 scores: floor(8/4) = 2 cut at each end -> mean of 3, 4, 5, 6 (the 100 outlier is cut)
    x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 100.0]])
    assert stats.iqm(x) == pytest.approx(4.5)
    # 10 scores: floor(10/4) = 2 cut at each end -> the middle 6
    y = np.arange(10.0).reshape(5, 2) ** 2
    assert stats.iqm(y) == pytest.approx(np.mean(np.sort(y.ravel())[2:8]))


def test_aggregates_against_scipy_and_hand_values():
    x = np.random.default_rng(0).random((7, 5))
    assert stats.iqm(x) == pytest.approx(scipy.stats.trim_mean(x.ravel(), 0.25))
    assert stats.mean(x) == pytest.approx(x.mean())
    # median of the per-task means (rliable's definition), by hand on 3 tasks
    z = np.array([[0.0, 1.0, 0.2], [1.0, 1.0, 0.4]])  # task means 0.5, 1.0, 0.3
    assert stats.median(z) == pytest.approx(0.5)
    # optimality gap: shortfall below gamma = 1, scores above count as 1
    assert stats.optimality_gap(np.array([[0.5, 1.2]])) == pytest.approx(0.25)
    assert stats.optimality_gap(np.array([[50.0, 100.0]]), gamma=100.0) == pytest.approx(25.0)


def test_aggregates_are_vectorised_over_replicates():
    x = np.random.default_rng(1).random((3, 6, 4))
    for fn in (stats.mean, stats.median, stats.iqm, stats.optimality_gap):
        assert np.allclose(fn(x), [fn(x[i]) for i in range(3)])


# -- bootstrap -----------------------------------------------------------------------------


def test_stratified_bootstrap_equals_a_plain_loop_with_the_same_draws():
    x = np.random.default_rng(2).random((5, 3))
    reps = 300
    got = stats.interval_estimates(x, {"mean": stats.mean, "iqm": stats.iqm}, reps, np.random.default_rng(7))
    # the same index draws, then a resampled matrix built task by task, aggregates by numpy/scipy
    idx = np.random.default_rng(7).integers(0, 5, size=(reps, 5, 3))
    means, iqms = [], []
    for r in range(reps):
        resampled = np.empty_like(x)
        for task in range(3):
            resampled[:, task] = x[idx[r, :, task], task]
        means.append(resampled.mean())
        iqms.append(scipy.stats.trim_mean(resampled.ravel(), 0.25))
    for name, values in (("mean", means), ("iqm", iqms)):
        point, lo, hi = got[name]
        assert (lo, hi) == pytest.approx(tuple(np.percentile(values, [2.5, 97.5])))
    assert got["mean"][0] == pytest.approx(x.mean())


def test_bootstrap_keeps_every_task_in_every_replicate():
    # task 1 is constant 5, task 0 is 0 or 1: a replicate's mean is (p + 5) / 2 with p the
    # resampled share of ones, so it never leaves [2.5, 3]
    x = np.array([[0.0, 5.0], [1.0, 5.0], [0.0, 5.0], [1.0, 5.0]])
    boot = stats.mean(stats.stratified_resample(x, 500, np.random.default_rng(0)))
    assert boot.min() >= 2.5 and boot.max() <= 3.0


def test_interval_covers_the_true_mean_about_95_percent_of_the_time():
    # 400 experiments of 40 runs x 5 tasks, N(mu_task, 0.2). Measured coverage over outer seeds
    # 1000..1007: 93.25 % to 95.5 % (mean 94.2 %; percentile intervals run slightly short at
    # 40 runs, sd of one estimate ~1.1 %); seed 1000 gives 94.25 %.
    mu = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    g = np.random.default_rng(1000)
    hits = 0
    for _ in range(400):
        x = mu + 0.2 * g.standard_normal((40, 5))
        _, lo, hi = stats.interval_estimates(x, {"mean": stats.mean}, 1000, g)["mean"]
        hits += lo <= mu.mean() <= hi
    assert 0.93 <= hits / 400 <= 0.97


def test_probability_of_improvement_is_the_mann_whitney_statistic():
    g = np.random.default_rng(3)
    x, y = np.round(g.random((5, 4)) * 4) / 4, np.round(g.random((7, 4)) * 4) / 4  # ties happen
    expected = np.mean([scipy.stats.mannwhitneyu(x[:, t], y[:, t], alternative="greater").statistic / 35 for t in range(4)])
    assert stats.probability_of_improvement(x, y) == pytest.approx(expected)
    assert stats.probability_of_improvement(x, y) + stats.probability_of_improvement(y, x) == pytest.approx(1.0)
    assert stats.probability_of_improvement(x, x) == pytest.approx(0.5)
    p, lo, hi = stats.improvement_interval(x, y, 400, np.random.default_rng(0))
    assert p == pytest.approx(expected) and lo <= p <= hi


def test_performance_profile_by_hand():
    x = np.array([[0.0, 0.5], [1.0, 0.75]])
    point, lo, hi = stats.performance_profile(x, np.array([-0.1, 0.25, 0.6, 1.0]), 200, np.random.default_rng(0))
    assert point.tolist() == [1.0, 0.75, 0.5, 0.0]
    assert np.all(lo <= point) and np.all(point <= hi)


def test_curve_band_brackets_the_mean_curve():
    curves = np.array([[0.0, 0.5, 1.0], [0.2, 0.3, 1.0], [0.1, 0.4, 1.0]])
    mean, lo, hi = stats.curve_band(curves, 300, np.random.default_rng(0))
    assert mean == pytest.approx(curves.mean(axis=0))
    assert np.all(lo <= mean + 1e-12) and np.all(mean <= hi + 1e-12)
    assert lo[2] == hi[2] == 1.0  # every run has 1.0 there


def test_agreement_with_rliable():
    """Optional: rliable 1.2.0 (not in the lock). Measured in a throwaway venv with rliable 1.2.0,
    arch 7.2.0, numpy 2.4.6 (arch 5.3.0, the version the brief named, has no release on the
    index; rliable 1.2.0 accepts arch >= 5.3.1, < 8): on 5 x 10 and 7 x 10 beta scores, mean,
    median, IQM, optimality gap and P(improvement) points equal to 1e-16; interval endpoints
    within 0.0029 at 50,000 resamples (Monte Carlo error: the two use different random streams)."""
    rly = pytest.importorskip("rliable.library")
    metrics = pytest.importorskip("rliable.metrics")
    g = np.random.default_rng(0)
    a = np.clip(g.beta(2, 2, size=(5, 10)) + 0.1, 0, 1)
    fn = lambda x: np.array([metrics.aggregate_mean(x), metrics.aggregate_median(x), metrics.aggregate_iqm(x), metrics.aggregate_optimality_gap(x)])
    points, cis = rly.get_interval_estimates({"a": a}, fn, reps=20000)
    mine = stats.interval_estimates(a, {"mean": stats.mean, "median": stats.median, "iqm": stats.iqm, "og": stats.optimality_gap}, 20000, np.random.default_rng(0))
    for i, name in enumerate(("mean", "median", "iqm", "og")):
        assert mine[name][0] == pytest.approx(points["a"][i], abs=1e-12)
        assert mine[name][1:] == pytest.approx((cis["a"][0, i], cis["a"][1, i]), abs=0.01)


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
    (run_dir / "config.yaml").write_text("name: digits_mean\nseed: 2\nepochs: 10\ndata: {name: digits}\naggregator: {name: mgda}\n")
    test = {"digit/loss": 0.2, "parity/loss": 0.1, "digit/accuracy": 0.9, "parity/accuracy": 0.95}
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 5, "time": 0, "epoch": 5, "test": {**test, "digit/accuracy": 0.8}}) + "\n"
                                           + json.dumps({"step": 10, "time": 0, "epoch": 10, "test": test}) + "\n")
    (run_dir / "final_metrics.json").write_text(json.dumps({"epoch": 10, "test": test, "directions": {"digit/accuracy": True, "parity/accuracy": True}}))
    (run,), _, _ = collect([run_dir])
    assert (run.kind, run.label, run.seed, run.metric.name, run.metric.best) == ("supervised", "mgda", 2, "test/accuracy", 1.0)
    assert run.tasks == ["digit", "parity"] and run.final.tolist() == [0.9, 0.95] and run.curve[:, 0].tolist() == [0.8, 0.9]


def test_collect_puts_forum_records_on_the_percent_scale_of_its_final_metrics(tmp_path):
    run_dir = tmp_path / "forum"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("name: f\nseed: 1\nproblem: mtl\nforum: {rho: 0.1}\n")
    records = [{"step": k, "time": 0, "kind": "eval", "test": {"a/accuracy": acc, "b/accuracy": 0.5}} for k, acc in ((20, 0.75), (40, 0.25))]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run_dir / "final_metrics.json").write_text(json.dumps({"forum": {"a/accuracy": 25.0, "b/accuracy": 50.0, "a/loss": 1.0},
                                                             "equal_weights": {"a/accuracy": 90.0, "b/accuracy": 90.0}}))
    (run,), _, _ = collect([run_dir])
    assert (run.kind, run.label, run.metric.name, run.metric.best) == ("forum", "mtl", "test/accuracy", 100.0)
    assert run.final.tolist() == [25.0, 50.0] and run.curve.tolist() == [[75.0, 50.0], [25.0, 50.0]]


def test_collect_reads_an_fl_run_and_its_final_row(tmp_path):
    run_dir = tmp_path / "fl"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("name: f\nstrategy: {name: fedavg}\nengine: {name: inprocess}\ntrain: {seed: 4}\n")
    rows = [{"step": r, "time": 0, "kind": "eval", "test_mean": acc, "model_share": [3, 2]} for r, acc in ((10, 0.6), (20, 0.8))]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "final_metrics.json").write_text(json.dumps({"final": {"round": 20, "test_mean": 0.8}, "best_val": {"round": 10, "test_mean": 0.6}}))
    (run,), _, _ = collect([run_dir])
    assert (run.kind, run.label, run.seed, run.tasks, run.final.tolist(), run.final_step) == ("fl", "fedavg", 4, ["all"], [0.8], 20)
    assert run.curve[:, 0].tolist() == [0.6, 0.8] and run.metric.best == 1.0


def test_sweep_labels_name_what_varies(tmp_path):
    success = np.full((len(STEPS), len(TASKS)), 0.5)
    groups = [{"aggregator.name": "mean", "run.device": "cpu"},
              {"aggregator.name": "cagrad", "aggregator.options": {"c": 0.5}, "run.device": "cpu"},
              {"aggregator.name": "mgda", "aggregator.options": {}, "run.device": "cpu"}]
    for i, group in enumerate(groups):
        write_rl_run(tmp_path / f"r{i}", group["aggregator.name"], 0, success)
    cells = [{"name": f"r{i}", "run_dir": f"r{i}", "group": g, "seed": 0} for i, g in enumerate(groups)]
    not_started = {"name": "r9", "run_dir": "r9", "group": {"aggregator.name": "mgda", "run.device": "cpu"}, "seed": 1}
    (tmp_path / "manifest.json").write_text(json.dumps({"cells": [*cells, not_started]}))
    runs, sweep, notes = collect([tmp_path])
    assert [r.label for r in runs] == ["mean", "cagrad, c=0.5", "mgda"] and sweep == tmp_path
    assert notes == [f"r9: not started (no {tmp_path}/r9/config.yaml), left out"]


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
    assert any(r["method"] == "mgda" and r["statistic"] == "iqm" and float(r["value"]) == pytest.approx(by_method["mgda"]["final"]["iqm"]["value"]) for r in rows)
    records = list(csv.DictReader((sweep / "report" / "records.csv").open()))
    assert len(records) == 6 * len(TASKS) * (len(STEPS) + 1)  # every eval point plus the final value
    assert "| task | cagrad | mgda |" in (sweep / "report" / "report.md").read_text()


def test_report_groups_run_dirs_by_config_keys(tmp_path, capsys):
    sweep, _ = write_sweep(tmp_path / "sweep", {"cagrad": 0.3, "mgda": 0.1}, seeds=[0, 1])
    runs = sorted(str(p) for p in (sweep / "runs").iterdir())
    code, out, err = _report([*runs, "--out", str(tmp_path / "r"), "--group-by", "run.seed", "--reps", "200", "--no-plots"], capsys)
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
