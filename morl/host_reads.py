"""Where reading a tensor's value on the host is free, so code may branch on it."""

from __future__ import annotations

import torch


def reads_are_free(t: torch.Tensor) -> bool:
    """True for a CPU tensor outside ``torch.compile``.

    On the CPU a value read (``bool(flag)``, ``.tolist()``) waits for nothing, so solvers stop
    early or finish small problems in Python there. On any other device it is a host
    synchronisation, and under ``torch.compile`` (CPU included) a graph break, which CUDA-graph
    capture cannot have: those take the branch-free tensor path instead.
    """
    return t.device.type == "cpu" and not torch.compiler.is_compiling()
