"""Checkpoint files: atomic writes and loads that never execute code from the file.

Writes go to a temporary file in the same folder, are fsynced, then renamed: a reader (or a
resumed run after ``kill -9``) sees either the previous file or the new one, never a
half-written one. ``last.pt`` keeps its predecessor as ``last.prev.pt`` (a hard link, no
copy), so a damaged ``last.pt`` falls back one checkpoint instead of losing the run.

Loads use ``torch.load(weights_only=True)``: only tensors and plain Python containers are
unpickled, so a foreign ``last.pt`` cannot run code. States that hold numpy objects (numpy
RNG states, numpy arrays) are stored as tagged tensors and turned back on load.
"""

from __future__ import annotations

import io
import os
import pickle
import secrets
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from morl.runners.errors import UserError

PREVIOUS_SUFFIX = ".prev"
_NDARRAY = "__morl_ndarray__"
_NPSCALAR = "__morl_npscalar__"


def _atomic_write_bytes(path: str | os.PathLike, data: bytes, keep_previous: bool = False) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # created like any other output, with the umask's permissions (mkstemp's would be 0600); a
    # hidden name next to the target, so os.replace is atomic
    tmp = str(path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if keep_previous and path.is_file():
            previous = previous_of(path)
            previous.unlink(missing_ok=True)
            try:
                os.link(path, previous)
            except OSError:  # a filesystem without hard links: keep no predecessor
                pass
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def previous_of(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.with_name(path.stem + PREVIOUS_SUFFIX + path.suffix)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    _atomic_write_bytes(path, text.encode())


def to_safe(obj: Any) -> Any:
    """``obj`` with numpy arrays and scalars replaced by tagged tensors (weights_only-loadable)."""
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise TypeError("checkpoints cannot hold numpy object arrays")
        return {_NDARRAY: torch.from_numpy(np.ascontiguousarray(obj).copy())}
    if isinstance(obj, np.generic):
        return {_NPSCALAR: torch.from_numpy(np.asarray(obj).reshape(1).copy())}
    if isinstance(obj, dict):
        return {key: to_safe(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [to_safe(value) for value in obj]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def from_safe(obj: Any) -> Any:
    """The inverse of :func:`to_safe`."""
    if isinstance(obj, dict):
        if len(obj) == 1 and _NDARRAY in obj:
            return obj[_NDARRAY].numpy()
        if len(obj) == 1 and _NPSCALAR in obj:
            return obj[_NPSCALAR].numpy()[0]
        return {key: from_safe(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [from_safe(value) for value in obj]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    buffer = io.BytesIO()
    torch.save(to_safe(obj), buffer)
    _atomic_write_bytes(path, buffer.getvalue(), keep_previous=Path(path).name == "last.pt")


class ForeignCheckpoint(UserError):
    """The file holds objects a checkpoint never holds: refused, never executed."""


def _load_one(path: Path, map_location: Any) -> Any:
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        if "weights_only" in str(exc) or "Unsupported global" in str(exc):
            raise ForeignCheckpoint(
                f"{path} holds objects a morl checkpoint never holds (refused without running it): "
                "use a checkpoint written by morl, or delete the file"
            ) from None
        raise UserError(f"{path} is damaged ({_first_line(exc)})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as exc:
        raise UserError(f"{path} is not a readable checkpoint ({_first_line(exc)})") from None
    if not isinstance(state, dict):
        raise UserError(f"{path} is not a morl checkpoint (it holds a {type(state).__name__}, not a state dict)")
    return from_safe(state)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def torch_load(path: str | os.PathLike, map_location: Any = "cpu") -> Any:
    """A checkpoint written by :func:`atomic_torch_save`, loaded without unpickling code.

    A foreign file (one holding arbitrary objects) is refused with one line. A damaged
    ``last.pt`` (truncated, empty) falls back to ``last.prev.pt`` when that is readable,
    saying so; otherwise one line names the file.
    """
    path = Path(path)
    try:
        return _load_one(path, map_location)
    except ForeignCheckpoint:
        raise
    except UserError as exc:
        previous = previous_of(path)
        if not previous.is_file():
            raise
        try:
            state = _load_one(previous, map_location)
        except UserError:
            raise exc from None
        print(f"morl: warning: {exc}; continuing from the checkpoint before it, {previous}", file=sys.stderr)
        return state


def remove_orphans(folder: str | os.PathLike) -> list[Path]:
    """Delete temporary files left by a write that was killed (``kill -9``) before its rename.

    Call only while holding the run's lock: a running writer's temporary file looks the same.
    """
    orphans = sorted(Path(folder).glob(".*.tmp"))
    for orphan in orphans:
        orphan.unlink(missing_ok=True)
    if orphans:
        print(
            f"morl: removed {len(orphans)} temporary file(s) left by an interrupted checkpoint write in {folder}",
            file=sys.stderr,
        )
    return orphans
