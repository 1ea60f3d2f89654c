"""How many MT-SAC updates follow each environment step: the warm-up and mtrl's catch-up.

Steps are counted from 1 (``step`` is the number of vector-env steps taken so far). The first
``run.warmup_steps`` steps act at random and make no update; every later step makes
``run.updates_per_step``. With ``run.warmup_catch_up`` the first learning step also makes the
updates the warm-up skipped, ``warmup_steps * updates_per_step`` in all, as mtrl does
(its loop runs ``init_steps`` updates at ``step == init_steps``; Sodhani et al.,
arXiv:2102.06177, whose MT10 runs the seeds' Table 9 reuses): the number of updates made by
the end of step n is then ``(n - 1) * updates_per_step``, mtrl's count, instead of
``(n - warmup_steps) * updates_per_step``.
"""

from __future__ import annotations


def updates_at(step: int, warmup_steps: int, updates_per_step: int, catch_up: bool) -> int:
    """Updates to make right after environment step ``step`` (1-based)."""
    if step <= warmup_steps:
        return 0
    if catch_up and step == warmup_steps + 1 and warmup_steps > 0:
        return warmup_steps * updates_per_step
    return updates_per_step


def updates_done(step: int, warmup_steps: int, updates_per_step: int, catch_up: bool) -> int:
    """Updates made by the end of step ``step``: the sum of :func:`updates_at` over steps 1..step."""
    if step <= warmup_steps:
        return 0
    extra = (warmup_steps - 1) * updates_per_step if catch_up and warmup_steps > 0 else 0
    return (step - warmup_steps) * updates_per_step + extra


def step_of_update(index: int, warmup_steps: int, updates_per_step: int, catch_up: bool) -> int:
    """The environment step after which update number ``index`` (0-based) is made."""
    first = warmup_steps * updates_per_step if catch_up and warmup_steps > 0 else updates_per_step
    if index < first:
        return warmup_steps + 1
    return warmup_steps + 2 + (index - first) // updates_per_step
