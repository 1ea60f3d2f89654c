"""Ctrl-C / SIGTERM on the sweep driver: stop every run the way ``morl`` stops one.

The first signal writes ``term`` into the sweep's stop file: each worker sends SIGTERM to its
run, which finishes its current unit, writes a checkpoint and exits (130); the driver waits
for them and exits 130, and the next ``morl sweep`` resumes them. A second signal (after the
same request's duplicate window) writes ``kill``: the runs stop at once, from their last
checkpoints.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from morl.runners.interrupts import DUPLICATE_SECONDS, signals_to

STOP_FILE = ".stop"


class SweepStop:
    def __init__(self, folder: Path) -> None:
        self.path = folder / STOP_FILE
        self.path.unlink(missing_ok=True)  # a request left by an earlier, killed driver
        self.requested = False
        self._first_at = 0.0

    def request(self, how: str = "term") -> None:
        from morl.runners.checkpoint import atomic_write_text

        self.requested = True
        atomic_write_text(self.path, how + "\n")

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if not self.requested:
            self._first_at = time.monotonic()
            self.request("term")
            print(
                f"\nmorl sweep: {name} received: each run writes a checkpoint and stops "
                "(send it again to stop them at once)",
                file=sys.stderr,
                flush=True,
            )
        elif time.monotonic() - self._first_at >= DUPLICATE_SECONDS:
            self.request("kill")
            print(f"\nmorl sweep: {name} received again: stopping every run now", file=sys.stderr, flush=True)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


@contextmanager
def sweep_stop(folder: Path) -> Iterator[SweepStop]:
    """Route SIGINT/SIGTERM to a :class:`SweepStop` inside the block (main thread only)."""
    stop = SweepStop(folder)
    try:
        with signals_to(stop._handle):
            yield stop
    finally:
        stop.clear()
