"""``status.json``: every cell's state and the history of its attempts over all invocations of
the sweep (kept across re-runs, so a cell started twice would show), and the final summary."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from morl.runners.sweep.cells import Cell

STATUS = "status.json"
LOGS = "logs"
# pending: not started; running: an attempt is under way; busy: an earlier sweep's process still
# holds the run; done / diverged: final; failed: every attempt of this invocation failed;
# interrupted: stopped by Ctrl-C on the sweep (resumes on the next invocation)
STATES = ("pending", "running", "busy", "done", "diverged", "failed", "interrupted")


def log_path(folder: Path, cell: Cell) -> Path:
    return folder / LOGS / f"{cell.name}.log"


class SweepStatus:
    def __init__(self, folder: Path, cells: list[Cell], engine: str) -> None:
        self.folder, self.engine = folder, engine
        old = _read(folder / STATUS).get("cells", {})
        self.cells: dict[str, dict[str, Any]] = {
            c.name: {
                "status": "pending",
                "run_dir": c.run_dir,
                "log": str(log_path(folder, c).relative_to(folder)),
                "attempts": list(old.get(c.name, {}).get("attempts", [])),
            }
            for c in cells
        }

    def set(self, name: str, state: str) -> None:
        self.cells[name]["status"] = state
        self.save()

    def attempt(self, name: str, action: str, started: float, exit_status: int | None, error: str = "") -> None:
        """Record one attempt (``start`` or ``resume``) that has ended."""
        record = {
            "action": action,
            "engine": self.engine,
            "started": _stamp(started),
            "ended": _stamp(time.time()),
            "exit_status": exit_status,
        }
        if error:
            record["error"] = error
        self.cells[name]["attempts"].append(record)

    def counts(self) -> Counter:
        return Counter(c["status"] for c in self.cells.values())

    def save(self) -> None:
        from morl.runners.checkpoint import atomic_write_text

        doc = {
            "updated": _stamp(time.time()),
            "engine": self.engine,
            "counts": dict(self.counts()),
            "cells": self.cells,
        }
        atomic_write_text(self.folder / STATUS, json.dumps(doc, indent=2) + "\n")

    def summary(self) -> list[str]:
        counts = self.counts()
        total = len(self.cells)
        lines = [f"morl sweep: {total} cells: " + ", ".join(f"{counts[s]} {s}" for s in STATES if counts[s])]
        for name, cell in self.cells.items():
            if cell["status"] in ("failed", "diverged"):
                last = cell["attempts"][-1] if cell["attempts"] else {}
                why = last.get("error") or f"exit status {last.get('exit_status')}"
                said = _last_line(self.folder / cell["log"])
                why += f": {said}" if said else ""
                lines.append(f"morl sweep:   {cell['status']}: {name} ({why}); log {self.folder / cell['log']}")
        return lines


def _last_line(log: Path) -> str:
    """What the last attempt said last (``morl: error: ...`` or an exception), for the summary."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    said = [line for line in lines if line.strip() and not line.startswith("==== ")]
    return said[-1].strip()[:300] if said else ""


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))
