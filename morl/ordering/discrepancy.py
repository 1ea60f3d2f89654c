"""Discrepancy measures of orders over vectors (the quantities GraB/JoGBa minimise)."""

from __future__ import annotations

import torch


def herding(order: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """H(π; z) = max_k ‖Σ_{i<=k} (z_{π(i)} − z̄)‖_∞ for ``z`` [K, d] and ``order`` [K]."""
    centred = z - z.mean(0)
    return centred[order].cumsum(0).abs().amax()


def combined_discrepancy(orders: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """C = max_k ‖Σ_m Σ_{i<=k} (G[m, π^m(i)] − Ḡ_m)‖_∞ for ``grads`` [M, K, d], ``orders`` [M, K].

    With fixed λ = 1 and static gradients this is the deviation of the SGD path from the
    mean path, the deviation that JoGBa's Propositions 3.8 and 3.10 bound.
    """
    m = torch.arange(grads.shape[0])[:, None]
    centred = grads - grads.mean(1, keepdim=True)
    return centred[m, orders].sum(0).cumsum(0).abs().amax()


def signed_prefix_discrepancy(z: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """max_k ‖Σ_{i<=k} ε_i z_i‖_∞ for ``z`` [K, d] and boolean (+1 = True) ``signs`` [K]."""
    eps = signs.to(z.dtype) * 2 - 1
    return (eps[:, None] * z).cumsum(0).abs().amax()
