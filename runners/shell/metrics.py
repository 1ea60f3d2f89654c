"""Writing an experiment's metrics: ``{tag: value | {name: value}}`` -> TensorBoard + metrics.jsonl."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


def _floats(value: Any) -> float | list[float]:
    if isinstance(value, torch.Tensor):
        value = value.detach().double().cpu().numpy()
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    return float(arr[0]) if arr.size == 1 else [float(x) for x in arr]


def resolve(metrics: dict[str, Any]) -> dict[str, Any]:
    """Device tensors and arrays read back to floats (one pass, at a log point)."""
    out: dict[str, Any] = {}
    for tag, value in metrics.items():
        if isinstance(value, dict):
            out[tag] = {name: _floats(v) for name, v in value.items()}
        elif isinstance(value, (int, float, bool, np.number, np.ndarray, torch.Tensor)):
            out[tag] = _floats(value)
        else:
            out[tag] = value  # strings and other JSON values go to metrics.jsonl only
    return out


def write(logger, position: int, kind: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """Log ``metrics`` at ``position``: scalars as ``tag`` and per-name dicts as ``tag/name``
    (non-finite values stay out of TensorBoard, null in metrics.jsonl); returns the floats."""
    values = resolve(metrics)
    for tag, value in values.items():
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for name, v in items:
            if isinstance(v, float) and math.isfinite(v):
                logger.writer.add_scalar(tag if name is None else f"{tag}/{name}", v, position)
    logger.record(position, kind=kind, **values)
    return values
