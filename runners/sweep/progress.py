"""The sweep's one progress bar: runs done / running / failed and an ETA.

The ETA counts the fraction of each running run (``position/total`` from its run.json), so it
moves between run ends; only progress made by this invocation sets the rate (runs finished
earlier, or the part of a resumed run done before, would make it look faster than it is).
Off a terminal, one line per change of state instead of a bar.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tqdm import tqdm

from morl.runners.progress import format_eta

BAR_FORMAT = "sweep: {percentage:3.0f}%|{bar}| {desc}"  # the counts go in desc: a postfix gets a leading comma


class SweepProgress:
    def __init__(self, total: int, enabled: bool | None = None) -> None:
        disable = (not sys.stderr.isatty()) if enabled is None else not enabled
        self.bar = tqdm(total=total, desc="", bar_format=BAR_FORMAT, dynamic_ncols=True, disable=disable)
        self.total, self.start = total, time.monotonic()
        self.first_fraction: dict[str, float] = {}  # cell -> its fraction when first seen running
        self.made_by_ended = 0.0  # the part of the cells this invocation finished that it did itself

    def ended(self, name: str) -> None:
        """An attempt of this invocation finished ``name``."""
        self.made_by_ended += 1.0 - self.first_fraction.get(name, 0.0)

    def update(self, done: int, running: dict[str, Path], failed: int, event: str = "") -> None:
        fractions = {name: _fraction(path) for name, path in running.items()}
        for name, f in fractions.items():
            self.first_fraction.setdefault(name, f)
        position = done + sum(fractions.values())
        made = self.made_by_ended + sum(f - self.first_fraction[n] for n, f in fractions.items())
        elapsed = time.monotonic() - self.start
        eta = format_eta((self.total - position) * elapsed / made if made > 0 else float("nan"))
        text = f"{done}/{self.total} done, {len(running)} running, {failed} failed, eta {eta}"
        self.bar.n = min(position, self.total)
        self.bar.set_description_str(text, refresh=True)
        if self.bar.disable and event:
            print(f"morl sweep: {event} [{text}]", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.bar.close()


def _fraction(run_dir: Path) -> float:
    from morl.runners.shell.run_info import read_run_info

    info = read_run_info(run_dir) or {}
    position, total = info.get("position"), info.get("total")
    if not isinstance(position, (int, float)) or not isinstance(total, (int, float)) or total <= 0:
        return 0.0
    return max(0.0, min(1.0, position / total))
