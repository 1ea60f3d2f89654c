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


def config_or_resume(schema, args, resume_keys: tuple[str, ...], command: str):
    """``(cfg, run_dir or None)`` for ``morl COMMAND CONFIG [k=v]`` or ``morl COMMAND --resume RUN_DIR [k=v]``.

    On resume the run's own config.yaml is loaded and only ``resume_keys`` may be overridden
    (the positional CONFIG slot then holds an override too); the run must have a checkpoint.
    """
    from runners.config import load_config

    if not args.resume:
        if args.config is None:
            raise UserError(f"give a config file (morl {command} CONFIG [key=value ...]) or --resume RUN_DIR")
        return load_config(schema, args.config, args.overrides), None
    run_dir = existing_run_dir(args.resume)
    extra = list(args.overrides) + ([args.config] if args.config else [])
    for item in extra:
        if item.split("=", 1)[0] not in resume_keys:
            raise UserError(f"with --resume only {', '.join(resume_keys)} may be overridden, got {item!r}")
    cfg = load_config(schema, run_dir / CONFIG_FILE, extra)
    last_checkpoint(run_dir)
    return cfg, run_dir


def drop_records_after(path: str | Path, step: int) -> None:
    """Forget ``metrics.jsonl`` lines logged after the checkpoint a resumed run restarts from,
    so the resumed run writes them again instead of twice."""
    import json

    from runners.checkpoint import atomic_write_text

    path = Path(path)
    if path.is_file():
        keep = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line).get("step", 0) <= step]
        atomic_write_text(path, "".join(line + "\n" for line in keep))
