"""Training that diverges stops with one line, a distinct exit status and the last good checkpoint.

The agents skip every update that would leave a NaN/inf behind and count them on the device;
the loops read the counters at their log and checkpoint points only. A run stops when the
longest run of consecutive skipped updates reaches the configured limit, or at once when the
policy's outputs are no longer finite (they must never reach an environment).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from morl.runners.errors import UserError

EXIT_DIVERGED = 3
ADVICE = "try a lower learning rate ({lrs}){clip}"


class Diverged(SystemExit):
    """Training diverged; ``message`` is the one line printed, the exit status is 3.

    A ``SystemExit`` so that every ``finally`` (progress bar, TensorBoard writer) still runs and
    the process ends with its own status without a traceback.
    """

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_DIVERGED)
        self.message = message

    def report(self) -> None:
        print(f"morl: error: {self.message}", file=sys.stderr, flush=True)


class NonFiniteState(Exception):
    """A checkpoint about to be written holds NaN/inf; ``args[0]`` names where."""


class NonFiniteOutput(UserError):
    """A network produced NaN/inf (e.g. actions); raised before the values are used."""


def advice(lrs: str, clip: str | None) -> str:
    return ADVICE.format(lrs=lrs, clip=f" or set {clip}" if clip else "")


def streak_text(longest: int, key: str, limit: int, total: int, done: int) -> str:
    return (
        f"{longest} updates in a row were non-finite (NaN/inf) and skipped ({key}={limit}; "
        f"{total} of {done} updates skipped in all)"
    )


def snapshot_steps(folder: Path) -> dict[int, Path]:
    """``{step: path}`` of the ``step_<N>.pt`` snapshots in a checkpoint folder."""
    found = {}
    for path in folder.glob("step_*.pt"):
        match = re.fullmatch(r"step_(\d+)\.pt", path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def checkpoint_text(folder: Path, good_before: int | None) -> str:
    """Names the newest snapshot written before step ``good_before`` (None: any is good)."""
    steps = snapshot_steps(folder)
    good = [s for s in steps if good_before is None or s < good_before]
    if not good:
        return "no checkpoint was written before it"
    best = max(good)
    return f"last good checkpoint {steps[best]} (step {best})"


def warn_skipped(total: int, reported: int, updates: int) -> str | None:
    """The warning line when updates were skipped since the last report (None if none were).

    ``updates``: how many updates were made since the last report.
    """
    if total <= reported:
        return None
    return (
        f"warning: {total - reported} of the last {updates} updates were non-finite (NaN/inf) and skipped "
        f"({total} in all); if this repeats, lower the learning rate"
    )


def first_nonfinite(state, where: str = "") -> str | None:
    """The dotted key of the first floating tensor in ``state`` holding NaN/inf (None: all finite)."""
    import torch

    if isinstance(state, torch.Tensor):
        return where if state.is_floating_point() and not bool(torch.isfinite(state).all()) else None
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else ()
    for key, value in items:
        found = first_nonfinite(value, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def all_skipped_text(skipped: int, made: int) -> str | None:
    """The reason to stop when every update was non-finite and skipped (None otherwise)."""
    if made == 0 or skipped < made:
        return None
    return f"every one of the {made} updates was non-finite (NaN/inf) and skipped: the model never trained"
