"""Maps from R^K onto the probability simplex Δ_K = {λ ≥ 0, Σλ = 1} and its optimality gap, batched."""

import torch


def project_simplex(v: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of ``v`` [..., K] onto the simplex (sort-based; Held et al. 1974, Duchi et al. 2008):
    with u sorted descending, ρ = max{j : u_j − (Σ_{i≤j} u_i − 1)/j > 0} and θ = (Σ_{i≤ρ} u_i − 1)/ρ, max(v − θ, 0)."""
    u, _ = torch.sort(v, dim=-1, descending=True)
    css = torch.cumsum(u, dim=-1) - 1.0
    ind = torch.arange(1, v.shape[-1] + 1, device=v.device, dtype=v.dtype)
    rho = ((u - css / ind) > 0).sum(dim=-1, keepdim=True).clamp(min=1)  # the condition holds on a prefix
    return torch.clamp(v - torch.gather(css, -1, rho - 1) / rho.to(v.dtype), min=0.0)


def softmax_map(v: torch.Tensor) -> torch.Tensor:
    """Softmax along the last dim: MoCo's practical "projection" (arXiv 2210.12624, App. K.2); not a projection."""
    return torch.softmax(v, dim=-1)


def fw_gap(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Frank–Wolfe gap xᵀg − min_i g_i of a convex objective with gradient ``grad`` at ``x`` (≥ 0; 0 iff optimal)."""
    return (x * grad).sum(-1) - grad.amin(-1)
