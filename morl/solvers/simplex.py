"""Maps from R^K onto the probability simplex Δ_K = {λ ≥ 0, Σλ = 1} and its optimality gap, batched over leading dims."""

from __future__ import annotations

import torch


def project_simplex(v: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of ``v`` (shape ``[..., K]``) onto the simplex, along the last dim.

    Sort-based algorithm (Held et al. 1974; Duchi et al. 2008), O(K log K), no host sync:
    with u sorted descending, ρ = max{j : u_j − (Σ_{i≤j} u_i − 1)/j > 0} and
    θ = (Σ_{i≤ρ} u_i − 1)/ρ, the projection is max(v − θ, 0).
    """
    k = v.shape[-1]
    u, _ = torch.sort(v, dim=-1, descending=True)
    css = torch.cumsum(u, dim=-1) - 1.0
    ind = torch.arange(1, k + 1, device=v.device, dtype=v.dtype)
    cond = (u - css / ind) > 0
    # The condition holds on a prefix (j = 1 always holds), so its length is rho.
    rho = cond.sum(dim=-1, keepdim=True).clamp(min=1)
    theta = torch.gather(css, -1, rho - 1) / rho.to(v.dtype)
    return torch.clamp(v - theta, min=0.0)


def softmax_map(v: torch.Tensor) -> torch.Tensor:
    """Softmax of ``v`` along the last dim: MoCo's practical "projection"
    (arXiv:2210.12624, App. K.2: the Cityscapes and NYU-v2 runs).

    Not a projection: a point already in the simplex is pulled toward uniform.
    """
    return torch.softmax(v, dim=-1)


def fw_gap(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Frank–Wolfe duality gap xᵀg − min_i g_i of a convex objective with gradient ``grad`` at
    ``x`` on the simplex (≥ 0; 0 iff x is optimal)."""
    return (x * grad).sum(-1) - grad.amin(-1)
