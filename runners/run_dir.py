"""Run directories: ``<out_dir>/<name>-<timestamp>/`` with config.yaml, tb/, checkpoints/, metrics.jsonl."""

from __future__ import annotations

import atexit
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from morl.runners.errors import UserError
from morl.runners.hints import command

CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.pt"
LOCK_FILE = ".lock"

_held_locks: dict[str, Any] = {}  # run directory -> open lock file, for this process's lifetime
_created: list[Path] = []  # run directories this process created, removed again if it fails before a checkpoint


def new_run_dir(out_dir: str | Path, name: str) -> Path:
    """Create a fresh run directory. Call only after every input has been validated."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise UserError(f"run name {name!r} may contain only letters, digits, '.', '_' and '-'")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(out_dir) / f"{name}-{stamp}"
    path, i = base, 1
    while path.exists():
        path, i = Path(f"{base}.{i}"), i + 1
    try:
        (path / CHECKPOINT_DIR).mkdir(parents=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the run directory {str(path)!r} ({exc.strerror}); set an output folder that is writable"
        ) from None
    _created.append(path)
    claim_run_dir(path)
    return path


def named_run_dir(path: str | Path) -> Path:
    """Create exactly ``path`` as a run directory (``--run-dir``; sweeps name their cells). It
    must not exist yet, or be an empty folder."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UserError(
            f"--run-dir {str(path)!r} already exists and is not an empty folder; "
            f"continue it with `{command('morl')} resume {path}` or choose a new path"
        )
    try:
        (path / CHECKPOINT_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the run directory {str(path)!r} ({exc.strerror}); choose a writable path"
        ) from None
    _created.append(path)
    claim_run_dir(path)
    return path


def claim_run_dir(run_dir: str | Path) -> None:
    """Lock ``run_dir`` for this process (one writer per run) and remove temporary files that a
    killed checkpoint write left behind (safe only once the lock is held)."""
    from morl.runners.checkpoint import remove_orphans
    from morl.runners.locks import acquire

    key = str(Path(run_dir).resolve())
    if key in _held_locks:
        return
    handle = acquire(
        Path(run_dir) / LOCK_FILE, f"run directory {str(run_dir)!r}", "wait for it to finish or stop it first"
    )
    if not _held_locks:
        atexit.register(release_run_dirs)  # runners called as functions (tests, notebooks) release at exit
    _held_locks[key] = handle
    remove_orphans(Path(run_dir) / CHECKPOINT_DIR)


def release_run_dirs(failed: bool = False) -> None:
    """Drop this process's run locks; after a failure, remove run directories it created that
    hold no checkpoint yet (nothing half-created is left behind)."""
    from morl.runners.locks import release

    for handle in _held_locks.values():
        release(handle)
    _held_locks.clear()
    if failed:
        for path in _created:
            if path.is_dir() and not (path / CHECKPOINT_DIR / LAST_CHECKPOINT).exists():
                shutil.rmtree(path, ignore_errors=True)
                print(f"morl: removed the unfinished run directory {path}", file=sys.stderr)
    _created.clear()


def existing_run_dir(path: str | Path) -> Path:
    """A run directory given on the command line (``morl eval``/``resume``), checked."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(
            f"{str(path)!r} is a file; give a run directory (the folder holding {CONFIG_FILE} and run.json)"
        )
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


def check_config_unchanged(
    run_dir: Path, config: dict[str, Any], overrides: list[str], stored: dict[str, Any] | None = None
) -> None:
    """Refuse to resume when ``config.yaml`` no longer equals the config the checkpoint was
    written with, except for keys given explicitly as overrides on this command line.

    A key that neither the checkpoint's config nor ``config.yaml`` has is a setting added to
    morl after the run started: it takes its default and is not an edit.
    """
    if stored is None:
        from morl.runners.checkpoint import torch_load

        stored = torch_load(last_checkpoint(run_dir)).get("config")
    if stored is None:
        return
    from morl.runners.config import read_yaml

    written = set(_leaves(read_yaml(run_dir / CONFIG_FILE)))  # every key the file itself has
    given = {item.split("=", 1)[0].strip() for item in overrides}
    for key, (old, new) in _differences(stored, config).items():
        if key in given or (old is _MISSING and key not in written):
            continue
        old, new = (None if v is _MISSING else v for v in (old, new))  # a key added or removed
        raise UserError(
            f"{run_dir / CONFIG_FILE} was edited since the last checkpoint ({key}: {old!r} -> {new!r}); "
            f"undo the edit, or pass {key}=... on the command line if the change is intended and allowed"
        )


_MISSING = object()


def _leaves(data: Any, prefix: str = ""):
    """Dotted keys of the leaves of a nested dict (a dict's own key too, for free-form options)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield f"{prefix}{key}"
            yield from _leaves(value, f"{prefix}{key}.")


def _differences(old: Any, new: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (old, new) for every leaf that differs; ``_MISSING`` where a side lacks it."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for key in sorted(set(old) | set(new), key=str):
            out.update(_differences(old.get(key, _MISSING), new.get(key, _MISSING), f"{prefix}{key}."))
        return out
    return {} if old == new else {prefix[:-1]: (old, new)}


def drop_records_after(path: str | Path, step: int) -> None:
    """Forget ``metrics.jsonl`` lines logged after the checkpoint a resumed run restarts from,
    so the resumed run writes them again instead of twice."""
    import json

    from morl.runners.checkpoint import atomic_write_text

    path = Path(path)
    if path.is_file():
        keep = [
            line for line in path.read_text().splitlines() if line.strip() and json.loads(line).get("step", 0) <= step
        ]
        atomic_write_text(path, "".join(line + "\n" for line in keep))
