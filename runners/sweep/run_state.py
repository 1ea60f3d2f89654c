"""What a cell's run directory needs next, read from the directory alone (``run.json``, the
run's ``.lock`` and its last checkpoint), so a re-run sweep continues wherever the last one
stopped, whatever stopped it (Ctrl-C, a crash, ``kill -9`` of the sweep or of one run).

- no directory, or one without a checkpoint and without a live owner: start (afresh);
- ``finished``: done; ``diverged``: done too (the method's result, retrying repeats it);
- ``.lock`` held by a live process: busy (an earlier sweep's run still going);
- otherwise (interrupted, failed, or "running" left behind by a killed process): resume from
  ``checkpoints/last.pt``.
"""

from __future__ import annotations

from pathlib import Path

DONE, DIVERGED, BUSY, START, RESUME = "done", "diverged", "busy", "start", "resume"


def next_action(run_dir: Path) -> str:
    from morl.runners.run_dir import CHECKPOINT_DIR, LAST_CHECKPOINT
    from morl.runners.shell.run_info import read_run_info

    if not run_dir.is_dir():
        return START
    if owner_alive(run_dir):
        return BUSY
    status = (read_run_info(run_dir) or {}).get("status")
    if status == "finished":
        return DONE
    if status == "diverged":
        return DIVERGED
    return RESUME if (run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT).is_file() else START


def stopped_on_purpose(run_dir: Path) -> bool:
    """Whether the run ended by handling SIGINT/SIGTERM: ``run.json`` says "interrupted" (a
    crash or SIGKILL leaves "running" or "failed" there instead)."""
    from morl.runners.shell.run_info import read_run_info

    return (read_run_info(run_dir) or {}).get("status") == "interrupted"


def owner_alive(run_dir: Path) -> bool:
    """Whether a process holds the run's lock (the lock dies with its process, even on SIGKILL)."""
    import fcntl

    from morl.runners.run_dir import LOCK_FILE

    try:
        handle = open(run_dir / LOCK_FILE)
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False
