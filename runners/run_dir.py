"""Run directories: ``<out_dir>/<name>-<timestamp>/`` with config.yaml, tb/, checkpoints/, metrics.jsonl."""

from __future__ import annotations

import re
import time
from pathlib import Path

from runners.errors import UserError

CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.pt"


def new_run_dir(out_dir: str | Path, name: str) -> Path:
    """Create a fresh run directory. Call only after every input has been validated."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise UserError(f"run name {name!r} may contain only letters, digits, '.', '_' and '-'")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(out_dir) / f"{name}-{stamp}"
    path, i = base, 1
    while path.exists():
        path, i = Path(f"{base}.{i}"), i + 1
    (path / CHECKPOINT_DIR).mkdir(parents=True)
    return path


def existing_run_dir(path: str | Path) -> Path:
    """A run directory given on the command line (``morl eval``/``resume``), checked."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"run directory {str(path)!r} does not exist")
    if not (path / CONFIG_FILE).is_file():
        raise UserError(f"{str(path)!r} is not a morl run directory (no {CONFIG_FILE})")
    return path


def last_checkpoint(run_dir: str | Path) -> Path:
    path = Path(run_dir) / CHECKPOINT_DIR / LAST_CHECKPOINT
    if not path.is_file():
        raise UserError(f"run directory {str(run_dir)!r} has no checkpoint yet ({CHECKPOINT_DIR}/{LAST_CHECKPOINT})")
    return path
