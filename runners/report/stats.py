"""Aggregate scores of runs x tasks, with 95 % stratified-bootstrap confidence intervals.

The statistics and their intervals are those of Agarwal et al., "Deep Reinforcement Learning at
the Edge of the Statistical Precipice", NeurIPS 2021, arXiv:2108.13264 (§4 and §A.1; their
library is rliable): a score matrix holds one row per run and one column per task; aggregates pool
every run-task score; the bootstrap resamples runs with replacement *within each task* (stratified,
so every task keeps its weight) and takes percentile intervals.

Everything is vectorised numpy: an aggregate maps ``[..., R, T]`` to ``[...]``, so one call
evaluates all bootstrap replicates ``[reps, R, T]`` at once. Only numpy is imported, so the
agreement with rliable can be checked from any environment that has it (tests/test_report.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np

CONFIDENCE = 0.95
Aggregate = Callable[[np.ndarray], np.ndarray]


def _pooled(x: np.ndarray) -> np.ndarray:
    return x.reshape(*x.shape[:-2], -1)


def mean(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=(-2, -1))


def median(x: np.ndarray) -> np.ndarray:
    """The median over tasks of the per-task mean over runs (rliable's definition)."""
    return np.median(x.mean(axis=-2), axis=-1)


def iqm(x: np.ndarray) -> np.ndarray:
    """Interquartile mean: the mean of the middle 50 % of the pooled run-task scores, cutting
    ``floor(n/4)`` scores at each end as ``scipy.stats.trim_mean(x, 0.25)`` (what rliable calls)."""
    flat = np.sort(_pooled(x), axis=-1)
    n = flat.shape[-1]
    cut = int(0.25 * n)
    return flat[..., cut : n - cut].mean(axis=-1)


def optimality_gap(x: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """How far scores fall short of ``gamma`` (the best possible score), on average; scores above
    ``gamma`` count as ``gamma`` (arXiv:2108.13264, §4.2)."""
    return (gamma - np.minimum(x, gamma)).mean(axis=(-2, -1))


def rng_for(seed: int, *names: str) -> np.random.Generator:
    """A stream per (seed, names): a method's intervals do not change when other methods are
    added to the report."""
    return np.random.default_rng([seed, *(zlib.crc32(n.encode()) for n in names)])


def stratified_resample(x: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``[R, T] -> [reps, R, T]``: in each replicate and each task, R runs drawn with replacement."""
    runs, tasks = x.shape
    idx = rng.integers(0, runs, size=(reps, runs, tasks))
    return x[idx, np.arange(tasks)]


def percentile_interval(replicates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 2.5 % and 97.5 % percentiles over the first axis."""
    tail = 100 * (1 - CONFIDENCE) / 2
    lo, hi = np.percentile(replicates, [tail, 100 - tail], axis=0)
    return lo, hi


def interval_estimates(
    x: np.ndarray, aggregates: dict[str, Aggregate], reps: int, rng: np.random.Generator
) -> dict[str, tuple[float, float, float]]:
    """``{name: (point, ci_low, ci_high)}`` for each aggregate of the score matrix ``x [R, T]``;
    one set of resamples serves all aggregates."""
    x = np.asarray(x, dtype=np.float64)
    boot = stratified_resample(x, reps, rng)
    out = {}
    for name, fn in aggregates.items():
        lo, hi = percentile_interval(fn(boot))
        out[name] = (float(fn(x)), float(lo), float(hi))
    return out


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) (+ half of P(X = Y)) for a run of X and a run of Y on the same task, averaged over
    tasks: the Mann-Whitney U statistic over R_x * R_y (arXiv:2108.13264, §4.3).

    ``x [..., Rx, T]``, ``y [..., Ry, T]`` -> ``[...]``."""
    a, b = x[..., :, None, :], y[..., None, :, :]
    wins = (a > b).mean(axis=(-3, -2)) + 0.5 * (a == b).mean(axis=(-3, -2))
    return wins.mean(axis=-1)


def improvement_interval(
    x: np.ndarray, y: np.ndarray, reps: int, rng: np.random.Generator, chunk: int = 250
) -> tuple[float, float, float]:
    """P(X > Y) with its interval: X's and Y's runs resampled independently, each within every
    task. Replicates go in chunks so the [reps, Rx, Ry, T] comparison stays small."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    parts = []
    for start in range(0, reps, chunk):
        n = min(chunk, reps - start)
        parts.append(probability_of_improvement(stratified_resample(x, n, rng), stratified_resample(y, n, rng)))
    lo, hi = percentile_interval(np.concatenate(parts))
    return float(probability_of_improvement(x, y)), float(lo), float(hi)


def performance_profile(
    x: np.ndarray, taus: np.ndarray, reps: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fraction of run-task scores above each threshold tau (the score distribution,
    arXiv:2108.13264 §4.1), with pointwise intervals: ``(point, low, high)``, each ``[len(taus)]``."""
    x = np.asarray(x, np.float64)
    taus = np.asarray(taus, np.float64)
    point = (x[..., None] > taus).mean(axis=(0, 1))
    boot = (stratified_resample(x, reps, rng)[..., None] > taus).mean(axis=(1, 2))
    lo, hi = percentile_interval(boot)
    return point, lo, hi


def run_resample(x: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``[R, ...] -> [reps, R, ...]``: whole runs (e.g. learning curves) drawn with replacement."""
    idx = rng.integers(0, x.shape[0], size=(reps, x.shape[0]))
    return x[idx]


def curve_band(curves: np.ndarray, reps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over runs of ``curves [R, E]`` at each evaluation point, with the pointwise percentile
    interval of the mean over runs resampled with replacement."""
    curves = np.asarray(curves, np.float64)
    lo, hi = percentile_interval(run_resample(curves, reps, rng).mean(axis=1))
    return curves.mean(axis=0), lo, hi
