"""One logger for every runner: TensorBoard event files plus a ``metrics.jsonl`` line per record.

Values may be floats, numpy arrays or device tensors; tensors are read back here, so callers
decide how often a host synchronisation happens (once per log interval, not per update).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch


def _to_float_array(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().float().cpu().numpy()
    return np.asarray(value, dtype=np.float64).reshape(-1)


class RunLogger:
    """Writes scalars to TensorBoard (``run_dir/tb``) and JSON lines to ``run_dir/metrics.jsonl``."""

    def __init__(self, run_dir: str | Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # purge_step drops events written after the checkpoint a resumed run restarts from.
        self.writer = SummaryWriter(log_dir=str(self.run_dir / "tb"), purge_step=purge_step)
        self._jsonl = open(self.run_dir / "metrics.jsonl", "a", buffering=1)

    def scalar(self, tag: str, value: Any, step: int) -> float:
        v = float(_to_float_array(value)[0])
        self.writer.add_scalar(tag, v, step)
        return v

    def per_task(
        self, tag: str, values: Any, task_names: Sequence[str], step: int, mean: bool = True
    ) -> dict[str, float]:
        """Log ``tag/<task>`` for each task and ``tag/mean``; returns the floats logged."""
        arr = _to_float_array(values)
        if arr.shape[0] != len(task_names):
            raise ValueError(f"{tag}: got {arr.shape[0]} values for {len(task_names)} tasks")
        out = {}
        for name, v in zip(task_names, arr):
            self.writer.add_scalar(f"{tag}/{name}", float(v), step)
            out[name] = float(v)
        if mean:
            out["mean"] = float(arr.mean())
            self.writer.add_scalar(f"{tag}/mean", out["mean"], step)
        return out

    def record(self, step: int, **metrics: Any) -> None:
        """Append one JSON line; arrays become lists, non-finite floats become null."""

        def clean(v):
            if isinstance(v, np.generic):  # a numpy scalar: its Python value
                return clean(v.item())
            if isinstance(v, (torch.Tensor, np.ndarray)):
                arr = _to_float_array(v)
                return [clean(float(x)) for x in arr] if arr.size != 1 else clean(float(arr[0]))
            if isinstance(v, float) and not math.isfinite(v):
                return None
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v

        line = {"step": int(step), "time": time.time(), **{k: clean(v) for k, v in metrics.items()}}
        self._jsonl.write(json.dumps(line) + "\n")

    def hparams(self, flat_config: dict[str, Any], metrics: dict[str, float] | None = None) -> None:
        """Record hyperparameters: a text table (always readable) and the HParams plugin."""
        rows = "\n".join(f"| {k} | {v} |" for k, v in flat_config.items())
        self.writer.add_text("config", "| key | value |\n|---|---|\n" + rows, 0)
        simple = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in flat_config.items()}
        # One HParams session per run in tb/hparams: its start/end info and the final metrics as
        # scalars, but no experiment summary. TensorBoard then builds the table from every run's
        # sessions, so keys only some runs have (e.g. aggregator.options.c) keep their column;
        # with one summary per run it would show the keys of whichever summary it read.
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        _, start, end = hparams(simple, metrics or {})
        with SummaryWriter(log_dir=str(self.run_dir / "tb" / "hparams")) as writer:
            writer.file_writer.add_summary(start)
            writer.file_writer.add_summary(end)
            for tag, value in (metrics or {}).items():
                writer.add_scalar(tag, value, 0)

    def flush(self) -> None:
        self.writer.flush()
        self._jsonl.flush()

    def close(self) -> None:
        self.writer.close()
        self._jsonl.close()


def flatten_config(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"agent": {"lr": 1}}`` -> ``{"agent.lr": 1}`` for hyperparameter tables."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten_config(v, key + "."))
        else:
            out[key] = v
    return out
