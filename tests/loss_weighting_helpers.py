"""Shared by the loss-weighting tests (tests/aggregators/test_{loss_weighting,uw,dwa,famo,gls,stch,gradnorm}.py):
random loss sequences, a float64 comparison, and weights as the gradient of an objective."""

from __future__ import annotations

import torch

#: float64 round-off over a dozen steps stays far below this (the methods are closed forms)
TOL = 1e-12


def loss_sequence(gen: torch.Generator, k: int, steps: int, low: float = 0.2, high: float = 3.0) -> list[torch.Tensor]:
    """``steps`` float64 loss vectors of K entries, uniform in [low, high)."""
    return [torch.rand(k, generator=gen, dtype=torch.float64) * (high - low) + low for _ in range(steps)]


def close(a, b, tol: float = TOL) -> None:
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    assert torch.allclose(a, b, rtol=tol, atol=tol * float(b.abs().max())), (a, b)


def autograd_weights(objective, losses: torch.Tensor) -> torch.Tensor:
    """w_k = ∂ objective / ∂L_k at ``losses``: the weights a scalarised objective puts on each loss."""
    leaf = losses.clone().requires_grad_(True)
    (w,) = torch.autograd.grad(objective(leaf), leaf)
    return w
