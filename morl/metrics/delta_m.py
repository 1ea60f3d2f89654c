"""Δm%: the average relative change of every metric against a baseline, signed so that
lower is better.

    Δm = (100 / J) Σ_j (−1)^{s_j} (M_j − B_j) / B_j,   s_j = 1 if metric j is higher-is-better

J counts metric *columns* (9 for NYU-v2, 11 for QM9): published Δm numbers (MoCo Table 6,
Nash-MTL, JoGBa) average over metrics, not over tasks, even where the text says "tasks".
A negative Δm means better than the baseline (usually single-task learning or "mean").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["delta_m"]


def _as_float(v, what: str) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {v!r}") from None
    if not math.isfinite(f):
        raise ValueError(f"{what} must be finite, got {f}")
    return f


def delta_m(
    values: Mapping[str, float] | Sequence[float],
    baseline: Mapping[str, float] | Sequence[float],
    higher_is_better: Mapping[str, bool] | Sequence[bool],
    metrics: Sequence[str] | None = None,
) -> float:
    """Δm in percent of ``values`` against ``baseline``.

    Either three equal-length sequences, or mappings keyed by metric name; with mappings
    the metrics used are ``metrics`` if given, else every key of ``higher_is_better``.
    Each used metric must be in ``values`` and ``baseline``, with a non-zero baseline.
    """
    if isinstance(higher_is_better, Mapping):
        names = list(metrics) if metrics is not None else list(higher_is_better)
        for label, m in (("values", values), ("baseline", baseline), ("higher_is_better", higher_is_better)):
            if not isinstance(m, Mapping):
                raise ValueError(f"{label} must be a mapping like higher_is_better")
            missing = [n for n in names if n not in m]
            if missing:
                raise ValueError(f"{label} lacks metric(s) {missing}; needed: {', '.join(names)}")
        vals = [values[n] for n in names]
        base = [baseline[n] for n in names]
        hib = [higher_is_better[n] for n in names]
    else:
        if metrics is not None:
            raise ValueError("metrics= selects names; it needs mappings, not sequences")
        names = [str(i) for i in range(len(higher_is_better))]
        vals, base, hib = list(values), list(baseline), list(higher_is_better)
        if not len(vals) == len(base) == len(hib):
            raise ValueError(
                f"values, baseline and higher_is_better need equal lengths, got {len(vals)}, {len(base)}, {len(hib)}"
            )
    if not names:
        raise ValueError("delta_m needs at least one metric")
    total = 0.0
    for n, v, b, h in zip(names, vals, base, hib):
        v, b = _as_float(v, f"value of {n!r}"), _as_float(b, f"baseline of {n!r}")
        if b == 0.0:
            raise ValueError(f"baseline of metric {n!r} is 0: the relative change is undefined")
        sign = -1.0 if bool(h) else 1.0
        total += sign * (v - b) / b
    return 100.0 * total / len(names)
