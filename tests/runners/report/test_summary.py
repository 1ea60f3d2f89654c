"""`morl report`'s numbers: runs grouped into methods, best over training, the scale of a joint
metric, the aggregates per metric, and the probability of improvement for either direction."""

from pathlib import Path

import numpy as np
import pytest

from morl.runners.errors import UserError
from morl.runners.report.collect import Run
from morl.runners.report.metrics import Metric
from morl.runners.report.summary import aggregates, group, improvements, summarise

SUCCESS = Metric("eval/success", True, 1.0)
MSE = Metric("test/mse", False, None)


def _run(label, seed, final, curve=(), steps=(), metric=SUCCESS, tasks=("a", "b")):
    final = np.asarray(final, dtype=float)
    curve = np.asarray(curve, dtype=float).reshape(len(steps), len(tasks))
    return Run(
        path=Path(f"{label}-s{seed}"),
        name=f"{label}-s{seed}",
        kind="rl",
        label=label,
        seed=seed,
        status="finished",
        metric=metric,
        tasks=list(tasks),
        steps=np.asarray(steps, dtype=np.int64),
        curve=curve,
        final=final,
        final_step=int(steps[-1]) if len(steps) else None,
    )


def test_methods_come_in_the_order_of_their_first_run():
    runs = [_run("mgda", 0, [0, 0]), _run("cagrad", 0, [1, 1]), _run("mgda", 1, [0.5, 0.5])]
    methods = group(runs)
    assert [(m.label, [r.name for r in m.runs]) for m in methods] == [
        ("mgda", ["mgda-s0", "mgda-s1"]),
        ("cagrad", ["cagrad-s0"]),
    ]
    assert methods[0].final.tolist() == [[0.0, 0.0], [0.5, 0.5]]


def test_runs_of_different_metrics_or_tasks_are_refused_in_one_line():
    with pytest.raises(UserError, match=r"different metrics \(eval/success, test/mse\)") as err:
        group([_run("a", 0, [1, 1]), _run("b", 0, [1, 1], metric=MSE)])
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="runs of one method must share their tasks"):
        group([_run("a", 0, [1, 1]), _run("a", 1, [1, 1], tasks=("a", "c"))])


def test_best_over_training_is_the_highest_mean_over_tasks_including_the_final_value():
    # means over tasks: 0.25 at step 10, 0.75 at step 20, final 0.5 -> best 0.75
    run = _run("m", 0, [0.5, 0.5], curve=[[0.0, 0.5], [1.0, 0.5]], steps=[10, 20])
    (method,) = group([run])
    assert method.best.tolist() == [0.75]


def test_best_over_training_of_a_lower_is_better_metric_is_the_lowest():
    # means over tasks: 0.4 at step 10, 0.3 at step 20, final 0.35 -> best 0.3 (the highest is 0.4)
    run = _run("m", 0, [0.3, 0.4], curve=[[0.5, 0.3], [0.2, 0.4]], steps=[10, 20], metric=MSE)
    (method,) = group([run])
    assert method.best == pytest.approx([0.3])


def test_a_run_without_a_curve_is_best_at_its_final_value():
    (method,) = group([_run("m", 0, [0.25, 0.75])])
    assert method.best.tolist() == [0.5] and method.steps.tolist() == [] and method.curves.shape == (1, 0)


def test_curves_keep_only_the_steps_every_run_of_a_method_has():
    a = _run("m", 0, [1, 1], curve=[[0, 0], [0.5, 1], [1, 1]], steps=[10, 20, 30])
    b = _run("m", 1, [1, 1], curve=[[0, 1], [1, 1]], steps=[20, 30])
    (method,) = group([a, b])
    assert method.steps.tolist() == [20, 30]
    assert method.curves.tolist() == [[0.75, 1.0], [0.5, 1.0]]
    assert method.task_curves[0].tolist() == [[0.5, 1.0], [1.0, 1.0]]


def test_the_joint_scale_is_percent_when_any_run_logs_percent():
    a = _run("m", 0, [0.5, 0.5], metric=Metric("test/accuracy", True, 1.0))
    b = _run("m", 1, [50.0, 50.0], metric=Metric("test/accuracy", True, 100.0))
    (method,) = group([a, b])
    assert method.metric == Metric("test/accuracy", True, 100.0)


def test_the_optimality_gap_is_only_for_bounded_higher_is_better_metrics():
    assert list(aggregates(SUCCESS)) == ["mean", "iqm", "median", "optimality_gap"]
    # gamma = 100: a score of 40 and one of 100 (capped) fall short by 60 and 0 on average 30
    gap = aggregates(Metric("test/accuracy", True, 100.0))["optimality_gap"]
    assert gap(np.array([[40.0, 100.0]])) == pytest.approx(30.0)
    assert list(aggregates(MSE)) == ["mean", "iqm", "median"]
    assert list(aggregates(Metric("eval/hv", True, None))) == ["mean", "iqm", "median"]
    # a shortfall below a best score means nothing when lower is better
    assert list(aggregates(Metric("test/error_rate", False, 1.0))) == ["mean", "iqm", "median"]


def test_probability_of_improvement_for_a_lower_is_better_metric_favours_the_lower_scores():
    low = [_run("low", s, [0.1, 0.2], metric=MSE) for s in (0, 1)]
    high = [_run("high", s, [0.3, 0.4], metric=MSE) for s in (0, 1)]
    pairs = {(p["x"], p["y"]): p["value"] for p in improvements(group(low + high), 100, 0)}
    assert pairs == {("low", "high"): 1.0, ("high", "low"): 0.0}
    # the same scores as success rates: higher wins
    low = [_run("low", s, [0.1, 0.2]) for s in (0, 1)]
    high = [_run("high", s, [0.3, 0.4]) for s in (0, 1)]
    pairs = {(p["x"], p["y"]): p["value"] for p in improvements(group(low + high), 100, 0)}
    assert pairs == {("low", "high"): 0.0, ("high", "low"): 1.0}


def test_methods_on_different_tasks_get_no_probability_of_improvement():
    methods = group([_run("x", 0, [1, 1]), _run("y", 0, [1, 1], tasks=("c", "d"))])
    assert improvements(methods, 100, 0) == []


def test_summarise_reports_the_hand_computed_points_of_each_method():
    runs = [
        _run("m", 0, [0.0, 1.0], curve=[[0.5, 0.5]], steps=[10]),
        _run("m", 1, [0.5, 1.0], curve=[[1.0, 1.0]], steps=[10]),
    ]
    s = summarise(group(runs), 200, 0)
    assert (s["metric"], s["higher_is_better"], s["best_possible"], s["reps"], s["seed"]) == (
        "eval/success",
        True,
        1.0,
        200,
        0,
    )
    (m,) = s["methods"]
    assert (m["method"], m["runs"], m["seeds"], m["run_dirs"], m["status"]) == (
        "m",
        2,
        [0, 1],
        ["m-s0", "m-s1"],
        ["finished", "finished"],
    )
    assert m["final"]["mean"]["value"] == pytest.approx(0.625)  # (0 + 1 + 0.5 + 1) / 4
    assert m["final"]["median"]["value"] == pytest.approx(0.625)  # median of the task means 0.25, 1
    assert m["final"]["optimality_gap"]["value"] == pytest.approx(0.375)
    # best over training: run 0 max(0.5, final 0.5) = 0.5, run 1 max(1.0, final 0.75) = 1.0
    assert m["best_over_training"]["mean"]["value"] == pytest.approx(0.75)
    assert m["per_task"]["a"]["value"] == pytest.approx(0.25) and m["per_task"]["b"]["value"] == 1.0
    assert m["per_task"]["b"]["ci"] == [1.0, 1.0]  # every run scored 1 there
    lo, hi = m["per_task"]["a"]["ci"]
    assert 0.0 <= lo <= 0.25 <= hi <= 0.5
    assert s["probability_of_improvement"] == []  # one method
