"""Ctrl-C / SIGTERM during training: finish the current step, write a checkpoint, then stop.

The first signal only sets a flag, which the training loop reads between two steps, where
the state is consistent (an env step and its updates are never split). A second signal
interrupts at once, without a checkpoint. Schedulers send SIGTERM before they kill a job,
so it gets the same treatment. A second signal within ``DUPLICATE_SECONDS`` of the first is
the same request delivered twice (``timeout make train`` signals both make and its process
group; a scheduler may signal the job step and the process), not a second Ctrl-C.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

DUPLICATE_SECONDS = 2.0


class StopRequest:
    """Set by the first SIGINT/SIGTERM; ``requested`` is read by the loop between steps."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""
        self._first_at = 0.0

    def _handle(self, signum, frame) -> None:
        if self.requested:
            if time.monotonic() - self._first_at < DUPLICATE_SECONDS:
                return  # the first request, delivered again
            raise KeyboardInterrupt  # a second, deliberate signal: stop now
        self.requested = True
        self._first_at = time.monotonic()
        self.signal_name = signal.Signals(signum).name
        print(
            f"\nmorl: {self.signal_name} received: stopping after this step and writing a checkpoint "
            "(send it again to stop at once, without one)",
            file=sys.stderr,
            flush=True,
        )


class Interrupted(KeyboardInterrupt):
    """Training stopped on request after writing a checkpoint; ``str()`` says how to go on."""


@contextmanager
def signals_to(handler) -> Iterator[None]:
    """Route SIGINT/SIGTERM to ``handler`` inside the block, then restore the previous handlers
    (main thread only: elsewhere signal handlers cannot be installed and the block runs as is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def deferred_stop() -> Iterator[StopRequest]:
    """Route SIGINT/SIGTERM to a :class:`StopRequest` inside the block (main thread only)."""
    stop = StopRequest()
    with signals_to(stop._handle):
        yield stop


@contextmanager
def immediate_stop(message: str) -> Iterator[None]:
    """Inside the block a SIGINT/SIGTERM raises :class:`Interrupted` (``message``) at once: for
    work that is safe to abandon because resuming redoes it from the last checkpoint (a run's
    final evaluation, e.g. FORUM's baselines), so a scheduler's SIGTERM never waits for it."""

    def handle(signum, frame):
        raise Interrupted(f"{signal.Signals(signum).name}: {message}")

    with signals_to(handle):
        yield
