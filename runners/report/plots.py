"""The report's figures, each as PNG and SVG: learning curves with 95 % bands (mean over tasks,
and one panel per task), the per-task heatmap, performance profiles, aggregator weights and gradient-conflict statistics over time,
and multi-objective runs' final fronts.

Figures are plain ``matplotlib.figure.Figure`` objects drawn by the Agg (PNG) and SVG canvases:
no pyplot, no global backend switch, no display needed. A figure whose data the runs do not hold
is skipped with a note.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from . import stats
from .collect import Series
from .summary import Method


def draw_all(methods: list[Method], out_dir: Path, reps: int, seed: int) -> tuple[list[str], list[str]]:
    """``(names drawn, notes on figures skipped)``; files ``out_dir/<name>.png|svg``."""
    drawn, notes = [], []
    for name, draw in (("learning_curves", learning_curves), ("per_task_curves", per_task_curves),
                       ("per_task_heatmap", per_task_heatmap),
                       ("performance_profiles", performance_profiles), ("aggregator_weights", aggregator_weights),
                       ("gradient_conflicts", gradient_conflicts), ("fronts", fronts)):  # fmt: skip
        fig = draw(methods, reps, seed)
        if isinstance(fig, str):
            notes.append(f"plot {name} skipped: {fig}")
            for ext in ("png", "svg"):  # an earlier report's figure would no longer match the tables
                (out_dir / f"{name}.{ext}").unlink(missing_ok=True)
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        for ext in ("png", "svg"):
            fig.savefig(out_dir / f"{name}.{ext}", dpi=120, bbox_inches="tight")
        drawn.append(name)
    return drawn, notes


def _figure(width: float = 6.4, height: float = 4.0, cols: int = 1):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * cols, height), layout="constrained")
    axes = fig.subplots(1, cols, squeeze=False)[0]
    return fig, axes


def learning_curves(methods: list[Method], reps: int, seed: int):
    with_curves = [m for m in methods if m.steps.size]
    if not with_curves:
        return "the runs hold no evaluation before the end (no learning curve)"
    fig, (ax,) = _figure()
    for m in with_curves:
        mean, lo, hi = stats.curve_band(m.curves, reps, stats.rng_for(seed, m.label, "curve"))
        (line,) = ax.plot(
            m.steps, mean, marker="o" if m.steps.size == 1 else None, label=_labelled(m.label, len(m.runs))
        )
        ax.fill_between(m.steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    metric = methods[0].metric
    ax.set(
        xlabel=_unit(methods[0]),
        ylabel=f"{metric.name}, mean over tasks",
        title="Learning curves (mean over runs, 95% bootstrap band)",
    )
    ax.legend(fontsize="small")
    return fig


def per_task_curves(methods: list[Method], reps: int, seed: int):
    with_curves = [m for m in methods if m.steps.size]
    tasks = list(dict.fromkeys(t for m in with_curves for t in m.tasks))
    if not with_curves or len(tasks) < 2:
        return "no per-task learning curves (one task, or no evaluation before the end)"
    from matplotlib.figure import Figure

    cols = min(5, len(tasks))
    fig = Figure(figsize=(3.0 * cols, 2.4 * -(-len(tasks) // cols) + 0.6), layout="constrained")
    axes = fig.subplots(-(-len(tasks) // cols), cols, squeeze=False, sharex=True, sharey=True).ravel()
    for ax, task in zip(axes, tasks):
        for i, m in enumerate(with_curves):
            if task in m.tasks:
                rng = stats.rng_for(seed, m.label, "task curve", task)
                mean, lo, hi = stats.curve_band(m.task_curves[:, :, m.tasks.index(task)], reps, rng)
                ax.plot(m.steps, mean, color=f"C{i}", label=_labelled(m.label, len(m.runs)))
                ax.fill_between(m.steps, lo, hi, color=f"C{i}", alpha=0.2, linewidth=0)
        ax.set_title(task, fontsize="small")
    for ax in axes[len(tasks) :]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    fig.supxlabel(_unit(with_curves[0]), fontsize="small")
    fig.suptitle(f"Per-task {methods[0].metric.name} (mean over runs, 95% bootstrap band)")
    return fig


def _labelled(label: str, runs: int) -> str:
    return f"{label} ({runs} run{'s' if runs != 1 else ''})"


def _unit(m: Method) -> str:
    return {
        "rl": "step",
        "mo": "step",
        "supervised": "epoch",
        "forum": "iteration",
        "fl": "round",
        "prompt": "step",
    }.get(m.runs[0].kind, "step")


def per_task_heatmap(methods: list[Method], reps: int, seed: int):
    tasks = list(dict.fromkeys(t for m in methods for t in m.tasks))
    if len(tasks) < 2:
        return "one score per run (no tasks to tell apart)"
    grid = np.array([[m.final[:, m.tasks.index(t)].mean() if t in m.tasks else np.nan for t in tasks] for m in methods])
    fig, (ax,) = _figure(max(4.0, 0.7 * len(tasks) + 2), max(2.0, 0.45 * len(methods) + 1.5))
    metric = methods[0].metric
    image = ax.imshow(
        grid,
        aspect="auto",
        cmap="viridis" if metric.higher_is_better else "viridis_r",
        vmin=0 if metric.best else None,
        vmax=metric.best,
    )
    ax.set_xticks(range(len(tasks)), tasks, rotation=45, ha="right")
    ax.set_yticks(range(len(methods)), [m.label for m in methods])
    if grid.size <= 300:
        for (i, j), v in np.ndenumerate(grid):
            r, g, b, _ = image.cmap(image.norm(v))
            ink = "k" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "w"  # readable on light and dark cells
            ax.text(j, i, "" if np.isnan(v) else f"{v:.2g}", ha="center", va="center", fontsize="x-small", color=ink)
    fig.colorbar(image, ax=ax, label=f"final {metric.name}, mean over runs")
    ax.set_title("Per-task final scores")
    return fig


def performance_profiles(methods: list[Method], reps: int, seed: int):
    metric = methods[0].metric
    scores = np.concatenate([m.final.ravel() for m in methods])
    scores = scores[np.isfinite(scores)]
    if not scores.size:
        return "no finite final score"
    lo_tau, hi_tau = (0.0, metric.best) if metric.best else (scores.min(), scores.max())
    taus = np.linspace(lo_tau, hi_tau, 101)
    fig, (ax,) = _figure()
    sign = 1.0 if metric.higher_is_better else -1.0  # lower is better: the fraction below tau
    for m in methods:
        point, lo, hi = stats.performance_profile(
            sign * m.final, sign * taus, reps, stats.rng_for(seed, m.label, "profile")
        )
        (line,) = ax.plot(taus, point, label=m.label)
        ax.fill_between(taus, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set(
        xlabel=f"threshold τ on final {metric.name}",
        ylabel=f"fraction of runs x tasks with score {'>' if sign > 0 else '<'} τ",
        title="Performance profiles (95% bootstrap band)",
        ylim=(-0.02, 1.02),
    )
    ax.legend(fontsize="small")
    return fig


def mean_series(series: list[Series]) -> Series:
    """Runs' series averaged at every step any of them logged (columns by name)."""
    steps = np.unique(np.concatenate([s.steps for s in series]))
    columns = list(dict.fromkeys(c for s in series for c in s.columns))
    stack = np.full((len(series), steps.size, len(columns)), np.nan)
    for i, s in enumerate(series):
        rows = np.searchsorted(steps, s.steps)
        for j, c in enumerate(s.columns):
            stack[i, rows, columns.index(c)] = s.values[:, j]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "mean of empty slice": a column no run logged at a step
        return Series(steps, np.nanmean(stack, axis=0), columns)


def _series_of(methods: list[Method], key: str) -> list[tuple[Method, Series]]:
    out = []
    for m in methods:
        found = [r.series[key] for r in m.runs if key in r.series]
        if found:
            out.append((m, mean_series(found)))
    return out


def aggregator_weights(methods: list[Method], reps: int, seed: int):
    found = _series_of(methods, "weights")
    if not found:
        return "the runs log no aggregator weights in metrics.jsonl"
    fig, axes = _figure(4.5, 3.5, cols=len(found))
    for ax, (m, s) in zip(axes, found):
        for j, c in enumerate(s.columns):
            ax.plot(s.steps, s.values[:, j], label=c)
        ax.set(title=m.label, xlabel=_unit(m), ylabel="weight (mean over runs)")
    axes[0].legend(fontsize="x-small")
    fig.suptitle("Aggregator weights per task over training")
    return fig


def gradient_conflicts(methods: list[Method], reps: int, seed: int):
    found = _series_of(methods, "conflicts")
    if not found:
        return "the runs log no gradient-conflict statistics"
    columns = list(dict.fromkeys(c for _, s in found for c in s.columns))
    fig, axes = _figure(4.5, 3.5, cols=len(columns))
    for ax, c in zip(axes, columns):
        for m, s in found:
            if c in s.columns:
                ax.plot(s.steps, s.values[:, s.columns.index(c)], label=m.label)
        ax.set(title=c, xlabel=_unit(found[0][0]))
    axes[0].legend(fontsize="x-small")
    fig.suptitle("Gradient conflicts over training (mean over runs)")
    return fig


def fronts(methods: list[Method], reps: int, seed: int):
    """Every run's final population of discounted returns, one panel per pair of objectives."""
    found = [(i, m, [r for r in m.runs if r.front is not None]) for i, m in enumerate(methods)]
    found = [(i, m, runs) for i, m, runs in found if runs]
    if not found:
        return "the runs hold no final front (multi-objective runs write one)"
    dims = {r.front.shape[1] for _, _, runs in found for r in runs}
    if len(dims) > 1:
        return f"the runs' fronts have different numbers of objectives ({sorted(dims)})"
    (m_obj,) = dims
    names = next((r.objectives for _, _, runs in found for r in runs if r.objectives), None)
    names = names or [f"objective {j}" for j in range(m_obj)]
    pairs = [(a, b) for a in range(m_obj) for b in range(a + 1, m_obj)]
    fig, axes = _figure(4.0, 3.6, cols=len(pairs))
    for ax, (a, b) in zip(axes, pairs):
        for i, m, runs in found:
            points = np.concatenate([r.front for r in runs])
            ax.scatter(points[:, a], points[:, b], s=6, alpha=0.5, color=f"C{i}", label=_labelled(m.label, len(runs)))
        ax.set(xlabel=names[a], ylabel=names[b])
    axes[0].legend(fontsize="x-small", markerscale=2)
    fig.suptitle("Final fronts: discounted return per preference, all runs")
    return fig
