"""ZDT-1/2/3 (Zitzler, Deb & Thiele 2000): two objectives of x ∈ [0, 1]^30.

    f1 = x_1,   g = 1 + 9/29 · Σ_{i=2..30} x_i,   f2 = g · h(f1, g)
    ZDT1: h = 1 − √(f1/g)        (convex front f2 = 1 − √f1)
    ZDT2: h = 1 − (f1/g)²        (non-convex front f2 = 1 − f1²)
    ZDT3: h = 1 − √(f1/g) − (f1/g) sin(10π f1)   (disconnected front: non-dominated part of g = 1)

The Pareto set is x_2..x_30 = 0. Functions are batched over leading dims and differentiable
(``√f1`` has an infinite slope at f1 = 0, so f1 is kept ≥ ``EPS`` inside the square root).
"""

from __future__ import annotations

import math

import torch

NAMES = ("zdt1", "zdt2", "zdt3")
DIM = 30
EPS = 1e-6
#: Hypervolume reference points of the official MosT code (``get_ref_point``).
REFERENCE_POINTS = {
    "zdt1": (0.99022638, 6.39358545),
    "zdt2": (0.99022638, 7.71577261),
    "zdt3": (0.99022638, 6.54635266),
}
#: Hypervolume of MosT (m = 5) in the paper's Table 5.
PAPER_HV_MOST = {"zdt1": 5.87, "zdt2": 6.88, "zdt3": 6.39}


def zdt(name: str, x: torch.Tensor) -> torch.Tensor:
    """Objectives ``[..., 2]`` of ``x [..., 30]`` for ``name`` in ``zdt1|zdt2|zdt3``."""
    if name not in NAMES:
        raise ValueError(f"unknown ZDT problem {name!r}; allowed: {', '.join(NAMES)}")
    if x.shape[-1] != DIM:
        raise ValueError(f"ZDT takes x of shape [..., {DIM}], got {tuple(x.shape)}")
    f1 = x[..., 0]
    g = 1 + 9.0 / 29.0 * x[..., 1:].sum(-1)
    r = f1.clamp_min(EPS) / g
    if name == "zdt1":
        h = 1 - torch.sqrt(r)
    elif name == "zdt2":
        h = 1 - r * r
    else:
        h = 1 - torch.sqrt(r) - r * torch.sin(10 * math.pi * f1)
    return torch.stack([f1, g * h], dim=-1)


def project(x: torch.Tensor) -> torch.Tensor:
    """Clamp onto the box [EPS, 1 − EPS]^30 (the code's clamp)."""
    return x.clamp(EPS, 1 - EPS)


def pareto_front(name: str, num: int = 1000) -> torch.Tensor:
    """``num`` points ``[k, 2]`` on the true front (for ZDT3 only the non-dominated ones)."""
    f1 = torch.linspace(0, 1, num, dtype=torch.float64)
    x = torch.zeros(num, DIM, dtype=torch.float64)
    x[:, 0] = f1
    f = zdt(name, x)
    if name == "zdt3":
        keep = ~((f.unsqueeze(0) <= f.unsqueeze(1)).all(-1) & (f.unsqueeze(0) < f.unsqueeze(1)).any(-1)).any(1)
        f = f[keep]
    return f


__all__ = ["NAMES", "DIM", "REFERENCE_POINTS", "PAPER_HV_MOST", "zdt", "project", "pareto_front"]
