"""A TensorBoard custom-scalars layout for comparing tasks and runs (the "Custom Scalars" tab).

Charts, in one category:

- every task's evaluation success in one chart,
- every aggregator weight in one chart,
- gradient-conflict statistics and throughput together (and each on its own scale).

A chart lists the tags it draws as regular expressions; TensorBoard draws every (run, tag) that
matches, so with ``--logdir`` on a sweep directory each chart holds all runs' lines. Layouts from
several runs are merged and identical charts kept once, so every run may write its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

CATEGORY = "morl: compare"
CONFLICT_TAGS = ("grad/cos_min", "grad/cos_mean", "grad/conflicting_pairs")
SPEED_TAGS = ("perf/transitions_per_s", "perf/updates_per_s")


def _exact(tags: Sequence[str]) -> list[str]:
    return [f"^{re.escape(t)}$" for t in tags]


def _per_task(prefix: str, task_names: Sequence[str] | None) -> list[str]:
    """``prefix/<task>`` for the given tasks, or for any task (not ``prefix/mean``) when None."""
    if task_names is None:
        return [f"^{re.escape(prefix)}/(?!mean$)[^/]+$"]
    return _exact([f"{prefix}/{t}" for t in task_names])


def layout(
    task_names: Sequence[str] | None = None,
    weight_tags: Sequence[str] | None = None,
    *,
    success_tag: str = "eval/success",
    weight_tag: str = "aggregator/weight",
    conflict_tags: Sequence[str] = CONFLICT_TAGS,
    speed_tags: Sequence[str] = SPEED_TAGS,
) -> dict:
    """The layout dict ``SummaryWriter.add_custom_scalars`` takes. ``weight_tags`` (exact tags)
    replace ``weight_tag/<task>``; charts with no tag are left out."""
    weights = _exact(weight_tags) if weight_tags is not None else _per_task(weight_tag, task_names)
    charts = {
        "eval success, every task": _per_task(success_tag, task_names),
        "aggregator weights": weights,
        "gradient conflicts and speed": _exact([*conflict_tags, *speed_tags]),
        "gradient conflicts": _exact(conflict_tags),
        "speed": _exact(speed_tags),
    }
    return {CATEGORY: {title: ["Multiline", tags] for title, tags in charts.items() if tags}}


def write_layout(
    writer, task_names: Sequence[str] | None = None, weight_tags: Sequence[str] | None = None, **tags
) -> dict:
    """Write the layout to ``writer`` (a ``torch.utils.tensorboard.SummaryWriter``, e.g.
    ``RunLogger.writer``) once, when a run starts; returns it. Keyword arguments as in
    :func:`layout` (``success_tag``, ``weight_tag``, ``conflict_tags``, ``speed_tags``)."""
    spec = layout(task_names, weight_tags, **tags)
    writer.add_custom_scalars(spec)
    writer.flush()
    return spec
