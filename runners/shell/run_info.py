"""``run.json``: what kind of run a directory holds and how far it got.

Written when the run starts, at every checkpoint and when it ends, so that ``morl resume``,
``morl eval``, ``morl sweep`` and ``morl report`` know the kind without guessing from config
keys, and a sweep can tell finished, interrupted and failed runs apart.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

RUN_INFO = "run.json"
STATUSES = ("running", "finished", "interrupted", "diverged", "failed")


def read_run_info(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / RUN_INFO
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def write_run_info(run_dir: str | Path, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into run.json (atomically) and return the result."""
    from morl.runners.checkpoint import atomic_write_text

    if "status" in fields and fields["status"] not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {fields['status']!r}")
    info = read_run_info(run_dir) or {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    info.update(fields, updated=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    info.setdefault("argv", sys.argv[1:])
    atomic_write_text(Path(run_dir) / RUN_INFO, json.dumps(info, indent=2) + "\n")
    return info
