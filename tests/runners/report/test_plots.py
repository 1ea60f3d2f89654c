"""`morl report` plots: every figure the data holds is written as a PNG and an SVG; figures whose
data is missing are skipped with a note, and a stale file of an earlier report is removed."""

import json

import numpy as np
import pytest

from morl.runners import cli
from morl.runners.report.collect import Series, collect
from morl.runners.report.plots import draw_all, fronts, mean_series
from morl.runners.report.summary import group
from tests.runners.report.report_runs import STEPS, TASKS, write_rl_run, write_sweep

ALL = [
    "learning_curves",
    "per_task_curves",
    "per_task_heatmap",
    "performance_profiles",
    "aggregator_weights",
    "gradient_conflicts",
]


def _assert_images(folder, names):
    for name in names:
        png = (folder / f"{name}.png").read_bytes()
        svg = (folder / f"{name}.svg").read_text()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
        assert "<svg" in svg and svg.rstrip().endswith("</svg>")


@pytest.mark.integration  # draws all six figures twice
def test_report_draws_every_plot_of_a_sweep(tmp_path, capsys):
    sweep, _ = write_sweep(tmp_path / "sweep", {"cagrad": 0.3, "mgda": 0.1}, seeds=[0, 1])
    assert cli.main(["report", str(sweep), "--reps", "200"]) == 0
    folder = sweep / "report" / "plots"
    _assert_images(folder, ALL)
    report_md = (sweep / "report" / "report.md").read_text()
    assert all(f"(plots/{name}.png)" in report_md for name in ALL)


def test_plots_without_weights_are_skipped_with_a_note(tmp_path):
    success = np.full((len(STEPS), len(TASKS)), 0.5)
    write_rl_run(tmp_path / "run", "mean", 0, success, weights=False)
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "aggregator_weights.png").write_bytes(b"old")  # from an earlier report
    runs, _, _ = collect([tmp_path / "run"])
    drawn, notes = draw_all(group(runs), tmp_path / "plots", 100, 0)
    assert drawn == [n for n in ALL if n != "aggregator_weights"]
    assert notes == [
        "plot aggregator_weights skipped: the runs log no aggregator weights in metrics.jsonl",
        "plot fronts skipped: the runs hold no final front (multi-objective runs write one)",
    ]
    assert not (tmp_path / "plots" / "aggregator_weights.png").exists()
    _assert_images(tmp_path / "plots", drawn)


def test_a_single_score_per_run_has_no_heatmap_and_no_curve(tmp_path, capsys):
    # a prompt-style run: the metric exists only in final_metrics.json, as one number
    run = tmp_path / "prompt"
    run.mkdir()
    (run / "config.yaml").write_text("name: p\nseed: 0\nmethod: most\nprompts: {num: 3}\ndispatcher: {target: ot}\n")
    (run / "metrics.jsonl").write_text(json.dumps({"step": 20, "time": 0, "val": {"oracle_acc": 0.7}}) + "\n")
    (run / "final_metrics.json").write_text(json.dumps({"steps": 40, "test": {"routed_acc": 0.62}}))
    assert cli.main(["report", str(run), "--out", str(tmp_path / "r"), "--reps", "100"]) == 0
    out = capsys.readouterr().out
    assert "| most | 1 | 0.620 [0.620, 0.620]" in out
    assert "plot learning_curves skipped" in out and "plot per_task_heatmap skipped" in out
    assert "plot per_task_curves skipped" in out
    _assert_images(tmp_path / "r" / "plots", ["performance_profiles"])


def test_mean_series_averages_runs_at_the_steps_each_logged():
    a = Series(np.array([10, 20]), np.array([[1.0], [3.0]]), ["w"])
    b = Series(np.array([20, 30]), np.array([[5.0], [7.0]]), ["w"])
    m = mean_series([a, b])
    assert m.steps.tolist() == [10, 20, 30] and m.values[:, 0].tolist() == [1.0, 4.0, 7.0]


def test_per_task_curves_hold_each_runs_scores_at_the_common_steps(tmp_path):
    sweep, tables = write_sweep(tmp_path / "sweep", {"cagrad": 0.3, "mgda": 0.1}, seeds=[0, 1, 2])
    runs, _, _ = collect([sweep])
    for m in group(runs):
        table = tables[m.label]  # [seeds, STEPS, TASKS], written by hand
        assert m.steps.tolist() == STEPS and m.tasks == TASKS
        np.testing.assert_array_equal(m.task_curves, table)
        np.testing.assert_allclose(m.curves, table.mean(axis=2))


def _write_mo_run(run, method, final):
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"agent: {{population: 3}}\naggregator: {{name: {method}}}\nrun: {{seed: 0}}\n")
    (run / "run.json").write_text(json.dumps({"kind": "mo", "status": "finished"}))
    (run / "final_metrics.json").write_text(json.dumps({"step": 10, "eval/hv": 5.0, **final}))


def test_fronts_are_read_from_morl_and_morl_baselines_runs_and_drawn_per_objective_pair(tmp_path):
    ours = {
        "a": {"p0": 1.0, "p1": 2.0, "p2": 3.0},
        "b": {"p0": 6.0, "p1": 5.0, "p2": 4.0},
        "c": {"p0": 0, "p1": 1, "p2": 0},
    }
    _write_mo_run(tmp_path / "ours", "linear", {f"eval/discounted_return/{k}": v for k, v in ours.items()})
    _write_mo_run(tmp_path / "theirs", "capql", {"eval/discounted_points": [[1.5, 5.5, 0.5], [2.5, 4.5, 0.5]]})
    runs, _, _ = collect([tmp_path / "ours", tmp_path / "theirs"])
    np.testing.assert_array_equal(runs[0].front, [[1, 6, 0], [2, 5, 1], [3, 4, 0]])
    assert runs[0].objectives == ["a", "b", "c"] and runs[1].objectives == []
    np.testing.assert_array_equal(runs[1].front, [[1.5, 5.5, 0.5], [2.5, 4.5, 0.5]])
    fig = fronts(group(runs), 100, 0)
    axes = fig.get_axes()
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in axes] == [("a", "b"), ("a", "c"), ("b", "c")]
    offsets = [c.get_offsets() for c in axes[1].collections]  # a against c: ours, then theirs
    np.testing.assert_array_equal(offsets[0], [[1, 0], [2, 1], [3, 0]])
    np.testing.assert_array_equal(offsets[1], [[1.5, 0.5], [2.5, 0.5]])
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["linear (1 run)", "capql (1 run)"]


def test_fronts_with_different_objective_counts_are_skipped_with_a_note(tmp_path):
    _write_mo_run(tmp_path / "two", "linear", {"eval/discounted_points": [[1.0, 2.0]]})
    _write_mo_run(tmp_path / "three", "capql", {"eval/discounted_points": [[1.0, 2.0, 3.0]]})
    runs, _, _ = collect([tmp_path / "two", tmp_path / "three"])
    assert fronts(group(runs), 100, 0) == "the runs' fronts have different numbers of objectives ([2, 3])"
