"""Where reading a tensor's value on the host is free, so an iterative solver may stop early."""

from __future__ import annotations

import torch


def reads_are_free(t: torch.Tensor) -> bool:
    """True for a CPU tensor outside ``torch.compile``.

    On the CPU a value read (``bool(flag)``) waits for nothing, so an iterative solver may read
    its convergence flag and stop early. On any other device it is a host synchronisation, and
    under ``torch.compile`` (CPU included) a graph break: there every iteration runs.
    """
    return t.device.type == "cpu" and not torch.compiler.is_compiling()
