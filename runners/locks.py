"""One writer per folder: an exclusive, non-blocking ``fcntl`` lock on a lock file that also
names its owner's pid. Run directories and sweep directories use it; the lock goes with the
process (also on SIGKILL), so a stale lock file never blocks anyone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from morl.runners.errors import UserError


def acquire(lock_path: Path, what: str, busy_hint: str) -> IO[str]:
    """Lock ``lock_path`` for this process and write its pid there; the open handle holds the
    lock. One ``UserError`` line naming ``what`` and the owner's pid if another process has it."""
    import fcntl

    try:
        handle = open(lock_path, "a+")
    except OSError as exc:
        raise UserError(f"cannot lock {what} ({exc.strerror}); it must be writable") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "unknown"
        handle.close()
        raise UserError(f"{what} is in use by another morl process (pid {owner}); {busy_hint}") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def release(handle: IO[str]) -> None:
    import fcntl

    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()
