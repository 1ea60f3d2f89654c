"""The numbers of a report: runs grouped into methods, then per method the final scores'
aggregates with 95 % stratified-bootstrap intervals (mean, IQM, median, optimality gap), the
best-over-training mean, per-task means, and the probability of improvement between methods.

Two protocols for multi-task RL, both reported and labelled:

- **final** (Meta-World+: McLean et al. 2025, arXiv:2505.11289, after Agarwal et al. 2021,
  arXiv:2108.13264): each run's last evaluation, one score per run and task; mean and IQM pool the
  runs x tasks scores.
- **best over training** (the MT10 tables of CAGrad, Liu et al., NeurIPS 2021, arXiv:2110.14048,
  and MoCo, Fernando et al., ICLR 2023, arXiv:2210.12624, Table 9): per run, the highest mean-over-tasks score over
  its evaluation points; averaged over runs (seeds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from morl.runners.errors import UserError

from . import stats
from .collect import Run
from .metrics import Metric


@dataclass
class Method:
    label: str
    runs: list[Run]
    metric: Metric
    tasks: list[str]
    final: np.ndarray  # [R, T] each run's final score per task
    best: np.ndarray  # [R] each run's best mean-over-tasks score over its evaluation points
    steps: np.ndarray  # [E] evaluation points every run of the method has
    curves: np.ndarray  # [R, E] mean-over-tasks score at those points
    task_curves: np.ndarray  # [R, E, T] per-task score at those points


def group(runs: list[Run]) -> list[Method]:
    """Methods in the order their first run appears (the sweep manifest's order)."""
    names = {r.metric.name for r in runs}
    if len(names) > 1:
        raise UserError(
            f"the runs measure different metrics ({', '.join(sorted(names))}): report one kind of run "
            "at a time, or name one metric every run logs with --metric"
        )
    by_label: dict[str, list[Run]] = {}
    for run in runs:
        by_label.setdefault(run.label, []).append(run)
    return [_method(label, members) for label, members in by_label.items()]


def _method(label: str, runs: list[Run]) -> Method:
    tasks = runs[0].tasks
    for run in runs[1:]:
        if run.tasks != tasks:
            raise UserError(
                f"method {label!r}: run {run.name} has tasks {run.tasks}, run {runs[0].name} has {tasks}; "
                "runs of one method must share their tasks (use --group-by to split them)"
            )
    metric = _joint_metric(runs)
    final = np.stack([r.final for r in runs])
    pick = np.nanmax if metric.higher_is_better else np.nanmin
    best = np.array(
        [
            pick(np.append(np.nanmean(r.curve, axis=1), np.nanmean(r.final))) if r.curve.size else np.nanmean(r.final)
            for r in runs
        ]
    )
    common = sorted(set.intersection(*(set(r.steps.tolist()) for r in runs)))
    task_curves = np.array([[r.curve[r.steps.tolist().index(s)] for s in common] for r in runs]).reshape(
        len(runs), len(common), len(tasks)
    )
    curves = np.array([[np.nanmean(row) for row in run] for run in task_curves]).reshape(len(runs), len(common))
    return Method(label, runs, metric, tasks, final, best, np.asarray(common, dtype=np.int64), curves, task_curves)


def _joint_metric(runs: list[Run]) -> Metric:
    """One scale for all runs: percent if any run logs percent."""
    bests = [r.metric.best for r in runs if r.metric.best is not None]
    first = runs[0].metric
    return Metric(first.name, first.higher_is_better, max(bests) if bests else None)


def aggregates(metric: Metric) -> dict[str, stats.Aggregate]:
    out: dict[str, stats.Aggregate] = {"mean": stats.mean, "iqm": stats.iqm, "median": stats.median}
    if metric.best is not None and metric.higher_is_better:
        gamma = metric.best
        out["optimality_gap"] = lambda x: stats.optimality_gap(x, gamma)
    return out


def summarise(methods: list[Method], reps: int, seed: int) -> dict[str, Any]:
    """Every number of the tables, as plain JSON values."""
    out = []
    for m in methods:
        final = stats.interval_estimates(m.final, aggregates(m.metric), reps, stats.rng_for(seed, m.label, "final"))
        best = stats.interval_estimates(
            m.best[:, None], {"mean": stats.mean}, reps, stats.rng_for(seed, m.label, "best")
        )
        out.append({
            "method": m.label, "kind": m.runs[0].kind, "runs": len(m.runs), "seeds": [r.seed for r in m.runs],
            "run_dirs": [r.name for r in m.runs], "final_steps": [r.final_step for r in m.runs],
            "status": [r.status for r in m.runs],
            "final": {k: _interval(v) for k, v in final.items()},
            "best_over_training": {k: _interval(v) for k, v in best.items()},
            "per_task": _per_task(m, reps, stats.rng_for(seed, m.label, "per_task")),
        })  # fmt: skip
    metric = methods[0].metric
    return {
        "metric": metric.name,
        "higher_is_better": metric.higher_is_better,
        "best_possible": metric.best,
        "confidence": stats.CONFIDENCE,
        "reps": reps,
        "seed": seed,
        "methods": out,
        "probability_of_improvement": improvements(methods, reps, seed),
    }


def _interval(v: tuple[float, float, float]) -> dict[str, Any]:
    return {"value": v[0], "ci": [v[1], v[2]]}


def _per_task(m: Method, reps: int, rng: np.random.Generator) -> dict[str, dict[str, Any]]:
    """Mean over runs per task; one resample of the [R, T] matrix serves all tasks."""
    boot = stats.stratified_resample(m.final, reps, rng).mean(axis=1)
    lo, hi = stats.percentile_interval(boot)
    point = m.final.mean(axis=0)
    return {t: {"value": float(point[j]), "ci": [float(lo[j]), float(hi[j])]} for j, t in enumerate(m.tasks)}


def improvements(methods: list[Method], reps: int, seed: int) -> list[dict[str, Any]]:
    """P(X better than Y) for every ordered pair on the same tasks; for a lower-is-better metric,
    better means lower."""
    out = []
    sign = 1.0 if methods and methods[0].metric.higher_is_better else -1.0
    for x in methods:
        for y in methods:
            if x is y or x.tasks != y.tasks:
                continue
            rng = stats.rng_for(seed, x.label, y.label, "improvement")
            p = stats.improvement_interval(sign * x.final, sign * y.final, reps, rng)
            out.append({"x": x.label, "y": y.label, "value": p[0], "ci": [p[1], p[2]]})
    return out
