"""Where reading a tensor's value on the host is free, so an iterative solver may stop early."""

from __future__ import annotations

from array import array
from collections.abc import Iterable

import torch

#: C array codes of the dtypes :func:`cpu_tensor` wraps (others go through torch.tensor)
ARRAY_CODE = {torch.float32: "f", torch.float64: "d"}


def reads_are_free(t: torch.Tensor) -> bool:
    """True for a CPU tensor outside ``torch.compile``.

    On the CPU a value read (``bool(flag)``) waits for nothing, so an iterative solver may read
    its convergence flag and stop early. On any other device it is a host synchronisation, and
    under ``torch.compile`` (CPU included) a graph break: there every iteration runs.
    """
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def cpu_tensor(values: Iterable, dtype: torch.dtype) -> torch.Tensor:
    """A 1-D CPU tensor of Python numbers (kept only until the methods that use it are rewritten)."""
    if dtype == torch.bool:
        data = bytearray(values)
    elif dtype in ARRAY_CODE:
        data = array(ARRAY_CODE[dtype], values)
    else:
        return torch.tensor(list(values), dtype=dtype)
    return torch.frombuffer(data, dtype=dtype) if len(data) else torch.empty(0, dtype=dtype)
