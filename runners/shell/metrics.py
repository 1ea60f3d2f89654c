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


def resolve(metrics: Any) -> Any:
    """Device tensors, numpy values and arrays read back to floats (lists for vectors), at any
    depth of nesting, at a log point; Python ints, bools and strings stay as they are."""
    if isinstance(metrics, dict):
        return {key: resolve(value) for key, value in metrics.items()}
    if isinstance(metrics, (list, tuple)) and not any(isinstance(v, (torch.Tensor, np.ndarray)) for v in metrics):
        return [resolve(v) for v in metrics]
    if isinstance(metrics, (bool, int, str)) or metrics is None:
        return metrics
    if isinstance(metrics, (float, np.number, np.ndarray, torch.Tensor, list, tuple)):
        return _floats(metrics)
    return metrics


FIGURES = "figures"  # metrics key of ``{tag: matplotlib Figure}``: TensorBoard images, not metrics.jsonl


def write(logger, position: int, kind: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """Log ``metrics`` at ``position``: scalars as ``tag``, nested dicts as ``tag/name/...``
    (non-finite values stay out of TensorBoard, null in metrics.jsonl), figures under
    ``metrics["figures"]`` as TensorBoard images; returns the values (without the figures)."""
    metrics = dict(metrics)
    for tag, figure in (metrics.pop(FIGURES, None) or {}).items():
        logger.writer.add_figure(
            tag, figure, position, close=False
        )  # no pyplot: the figure is freed with its last reference
    values = resolve(metrics)
    for tag, value in _scalars(values):
        logger.writer.add_scalar(tag, value, position)
    logger.record(position, kind=kind, **values)
    return values


def _scalars(values: dict[str, Any], prefix: str = ""):
    """(``tag/name/...``, value) for every finite number in a nested metrics dict."""
    for key, value in values.items():
        if isinstance(value, dict):
            yield from _scalars(value, f"{prefix}{key}/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            yield f"{prefix}{key}", float(value)
