"""Δm% of every method against a baseline method (``morl report --baseline GROUP``), seed by seed.

Each run is compared with the baseline's run of the same seed (same data split and
initialisation), on the report's metric per task, by the formula of Maninis et al., CVPR 2019,
as used by Navon et al., ICML 2022, arXiv:2202.01017 (§6):

    Δm = (100 / T) Σ_t (−1)^{s_t} (M_t − B_t) / B_t,   s_t = 1 if task t's metric is higher-is-better

computed by ``morl.metrics.delta_m`` (lower is better). A task's direction is the one its run
stores in ``final_metrics.json["directions"]`` (``"<task>/<metric>"``, as ``morl supervised``
writes them), else the metric's. A method's Δm is the mean over its paired seeds, with a 95 %
bootstrap interval over those seeds (the report's resampling, one task).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from morl.metrics.delta_m import delta_m
from morl.runners.errors import UserError

from . import stats
from .collect import Run


def directions(run: Run) -> list[bool]:
    """Higher-is-better per task of ``run``, from its stored directions where it has them."""
    stored: dict[str, Any] = {}
    path = run.path / "final_metrics.json"
    if path.is_file():
        try:
            stored = json.loads(path.read_text()).get("directions") or {}
        except (json.JSONDecodeError, AttributeError):
            stored = {}
    tail = run.metric.name.rsplit("/", 1)[-1]
    return [bool(stored.get(f"{t}/{tail}", run.metric.higher_is_better)) for t in run.tasks]


def per_seed(method, base) -> tuple[dict[int, float], list[str]]:
    """``{seed: Δm%}`` of ``method``'s runs against ``base``'s run of the same seed, and notes
    for the seeds left out (no baseline run, or a baseline score of 0)."""
    by_seed = {r.seed: r for r in base.runs if r.seed is not None}
    out, notes = {}, []
    for run in method.runs:
        ref = by_seed.get(run.seed)
        if ref is None:
            notes.append(f"Δm%: {run.name} (seed {run.seed}) left out: {base.label} has no run with that seed")
            continue
        zero = [t for t, b in zip(ref.tasks, ref.final) if b == 0]
        if zero:
            notes.append(
                f"Δm%: seed {run.seed} of {method.label} left out: {base.label}'s score on {', '.join(zero)} is 0"
            )
            continue
        out[run.seed] = delta_m(run.final.tolist(), ref.final.tolist(), directions(run))
    return out, notes


def summarise_delta(methods: list, baseline: str, reps: int, seed: int) -> tuple[dict[str, Any], list[str]]:
    """The ``delta_m`` section of the report: per method, the per-seed values, their mean and
    its 95 % interval; notes for what was left out."""
    labels = [m.label for m in methods]
    if baseline not in labels:
        raise UserError(f"--baseline {baseline!r} is not a method of this report; its methods are: {', '.join(labels)}")
    base = methods[labels.index(baseline)]
    rows, notes = [], []
    for m in methods:
        if m is base:
            continue
        if m.tasks != base.tasks:
            notes.append(f"Δm%: {m.label} left out: its tasks differ from {baseline}'s")
            continue
        values, left = per_seed(m, base)
        notes += left
        if not values:
            continue
        x = np.array(list(values.values()))[:, None]
        point, lo, hi = stats.interval_estimates(
            x, {"mean": stats.mean}, reps, stats.rng_for(seed, m.label, "delta_m")
        )["mean"]
        rows.append(
            {
                "method": m.label,
                "runs": len(values),
                "seeds": list(values),
                "per_seed": list(values.values()),
                "value": point,
                "ci": [lo, hi],
            }
        )
    return {"baseline": baseline, "methods": rows}, notes
