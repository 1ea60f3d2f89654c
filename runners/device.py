"""Device selection shared by every runner."""

from __future__ import annotations

import torch

from morl.runners.errors import UserError


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when available; anything else must be a valid, present device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device {name!r} is not valid; allowed: auto, cpu, cuda, cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r} requested but CUDA is not available; use device=cpu or device=auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise UserError(f"device {name!r} requested but this machine has {n} CUDA device(s): cuda:0 to cuda:{n - 1}")
    if device.type not in ("cpu", "cuda"):
        raise UserError(f"device {name!r} is not supported; allowed: auto, cpu, cuda, cuda:N")
    return device
