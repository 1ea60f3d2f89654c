"""The sweep directory: ``<out_dir>/<name>/manifest.json`` (the spec and every cell), one run
directory per cell, ``logs/`` and ``status.json``; one sweep driver at a time (``.lock``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from morl.runners.errors import UserError
from morl.runners.sweep.cells import Cell
from morl.runners.sweep.spec import SweepSpec

MANIFEST = "manifest.json"
LOCK = ".lock"
_held: dict[str, Any] = {}  # sweep directory -> open lock file, for this process's lifetime


def sweep_dir(spec: SweepSpec) -> Path:
    return Path(spec.out_dir) / spec.name


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise UserError(f"{path} is not valid JSON; restore it or remove the sweep directory") from None


def write_manifest(folder: Path, spec: SweepSpec, cells: list[Cell]) -> Path:
    """Write the manifest (atomically) once the cells agree with any earlier one: a re-run may add
    cells (more seeds, more values) but never change what an existing cell runs."""
    from morl.runners.checkpoint import atomic_write_text

    check_manifest(folder, cells)
    manifest = {"name": spec.name, "spec": spec.as_dict(), "cells": [c.as_dict() for c in cells]}
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the sweep directory {str(folder)!r} ({exc.strerror}); set a writable out_dir"
        ) from None
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return folder / MANIFEST


def check_manifest(folder: Path, cells: list[Cell]) -> None:
    """Refuse cells that differ from the ones an earlier run of the sweep wrote (one line)."""
    old = read_manifest(folder)
    if old is None:
        return
    new = {c.name: c for c in cells}
    for cell in old.get("cells", []):
        name = cell.get("name")
        if name not in new:
            raise UserError(
                f"the spec no longer has cell {name!r} that {folder} holds; "
                "restore the spec, or give the sweep a new name or out_dir"
            )
        now = new[name]
        was = (cell.get("command"), cell.get("config"), list(cell.get("overrides", [])))
        if was != (now.command, now.config, list(now.overrides)):
            then, there = _shown(str(was[1]), now.config)
            raise UserError(
                f"cell {name!r} of {folder} ran `{was[0]} {then} {' '.join(was[2])}`, "
                f"the spec now gives `{now.command} {there} {' '.join(now.overrides)}`; "
                "give the sweep a new name or out_dir (or run it from the directory it was started in)"
            )


def _shown(then: str, now: str) -> tuple[str, str]:
    """Config files by name, or by full path when only their folders differ (run from elsewhere)."""
    if Path(then).name == Path(now).name and then != now:
        return then, now
    return Path(then).name, Path(now).name


def claim_sweep(folder: Path) -> None:
    """Lock the sweep directory for this driver (two drivers would run the same cells)."""
    from morl.runners.locks import acquire

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the sweep directory {str(folder)!r} ({exc.strerror}); set a writable out_dir"
        ) from None
    key = str(folder.resolve())
    if key not in _held:
        _held[key] = acquire(folder / LOCK, f"sweep {str(folder)!r}", "wait for that morl sweep or stop it first")


def release_sweep(folder: Path) -> None:
    from morl.runners.locks import release

    handle = _held.pop(str(folder.resolve()), None)
    if handle is not None:
        release(handle)
