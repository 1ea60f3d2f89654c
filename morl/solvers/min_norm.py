"""Min-norm point of the convex hull of K gradients, from their K×K Gramian.

    λ* = argmin_{λ∈Δ_K} ½ λᵀ G λ (+ ρ/2 ‖λ‖²),    d = Σ_k λ*_k g_k.

K = 2 has a closed form (with the reference code's tie branches); K > 2 uses accelerated
projected gradient on the simplex (:mod:`morl.solvers.simplex_descent`). All functions take
``gram`` of shape ``[..., K, K]`` and return ``λ`` of shape ``[..., K]``; they solve in float64
on the Gramian divided by its largest diagonal entry, so the answer does not depend on the
gradients' scale.
"""

from __future__ import annotations

import torch

from morl.solvers.gramian import gram_scale
from morl.solvers.simplex_descent import fw_gap, minimize_on_simplex

#: The reference code's denominator guard, here relative to the (normalised) Gramian.
EPS_2 = 1e-8
#: Up to this K the min-norm problem is solved exactly by enumerating supports (2^K − 1
#: small linear systems in one batched solve): ~1 ms instead of tens of FISTA iterations
#: of small kernels each. Above it the batch grows as 2^K and the iterative solver wins.
EXACT_MAX_K = 10
#: Ridge added to each support's system so colinear or identical gradients stay solvable.
RIDGE = 1e-12


def support_masks(k: int, device: torch.device) -> torch.Tensor:
    """All 2^k − 1 non-empty supports as a float64 mask matrix ``[S, k]``."""
    idx = torch.arange(1, 2**k, device=device)
    return ((idx.unsqueeze(-1) >> torch.arange(k, device=device)) & 1).to(torch.float64)


def support_systems(gram: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(masks [S, K], A [..., S, K, K])``: for every non-empty support S, ``A`` is G restricted
    to S (plus :data:`RIDGE` on the diagonal) with the identity outside it, so that solving
    ``A x = 1_S`` or ``A x = b ⊙ 1_S`` gives ``G_SS⁻¹`` applied on S and zeros elsewhere.
    The exact small-K solvers (min-norm here, CAGrad's dual) enumerate supports with it."""
    k = gram.shape[-1]
    m = support_masks(k, gram.device)
    eye = torch.eye(k, dtype=gram.dtype, device=gram.device)
    a = m[:, :, None] * (gram + RIDGE * eye).unsqueeze(-3) * m[:, None, :] + torch.diag_embed(1 - m)
    return m, a


def min_norm_exact(gram: torch.Tensor) -> torch.Tensor:
    """Exact min-norm weights by support enumeration (use for small K; no iteration, no sync).

    For every support S the equality-constrained problem min ½λᵀGλ, 1ᵀλ = 1, λ_i = 0 (i ∉ S)
    gives λ_S ∝ G_SS⁻¹1. The optimum's own support yields the optimum, every other feasible
    candidate is a feasible point, so the feasible candidate of least objective is optimal.
    """
    k = gram.shape[-1]
    g = gram.to(torch.float64)
    g = g / gram_scale(g)
    m, a = support_systems(g)  # [S, K], [..., S, K, K]
    x = torch.linalg.solve(a, m.expand(a.shape[:-1]))  # [..., S, K]
    total = x.sum(-1, keepdim=True)
    lam = x / torch.where(total.abs() > 0, total, torch.ones_like(total))
    feasible = (lam >= -1e-12).all(-1) & (total.squeeze(-1) > 0)
    obj = ((lam.unsqueeze(-2) @ g.unsqueeze(-3)).squeeze(-2) * lam).sum(-1)  # [..., S]
    obj = torch.where(feasible, obj, torch.full_like(obj, float("inf")))
    # Degenerate (rank-deficient) Gramians have many optimal supports: take the first one
    # within rounding of the optimum so the weights do not flip with the gradients' scale.
    tied = obj <= obj.amin(-1, keepdim=True) + 1e-10
    best = tied.to(torch.int8).argmax(-1, keepdim=True)  # first tied support, [..., 1]
    out = torch.gather(lam, -2, best.unsqueeze(-1).expand(*best.shape, k)).squeeze(-2).clamp_min(0)
    return out / out.sum(-1, keepdim=True)


def min_norm_2(gram: torch.Tensor, eps: float = EPS_2) -> torch.Tensor:
    """Closed-form K = 2 min-norm weights ``[..., 2]`` (spec §1.3, code form).

    With g11 = ‖g1‖², g12 = g1·g2, g22 = ‖g2‖²:
    if g12 < min(g11, g22): λ = (g22 − g12)/(g11 + g22 − 2 g12 + eps);
    elif g11 < g22: λ = 1 (g1 is the shorter one and already the min-norm point);
    else: λ = 0. Weights are (λ, 1 − λ).
    """
    g = gram / gram_scale(gram)
    g11, g12, g22 = g[..., 0, 0], g[..., 0, 1], g[..., 1, 1]
    inner = (g22 - g12) / (g11 + g22 - 2 * g12 + eps)
    lam = torch.where(g12 < torch.minimum(g11, g22), inner, torch.where(g11 < g22, torch.ones_like(g11), torch.zeros_like(g11)))
    lam = lam.clamp(0.0, 1.0)
    return torch.stack([lam, 1 - lam], dim=-1)


def min_norm(
    gram: torch.Tensor,
    rho: float = 0.0,
    max_iter: int = 500,
    tol: float = 1e-12,
    init: torch.Tensor | None = None,
) -> torch.Tensor:
    """Weights λ ∈ Δ_K minimising ½‖Σ λ_k g_k‖² + (ρ/2)‖λ‖² given ``gram`` = [g_i·g_j].

    ``rho`` is in the units of ``gram`` (MoCo's regulariser; 0 gives MGDA). K = 1 returns 1,
    K = 2 the closed form, 2 < K ≤ ``EXACT_MAX_K`` (without ``init``) the exact support
    enumeration, larger K iterates from ``init`` (default uniform) until the
    Frank–Wolfe gap of the normalised problem is below ``tol`` or ``max_iter`` is reached.
    """
    k = gram.shape[-1]
    work = gram.to(torch.float64)
    if rho:
        work = work + rho * torch.eye(k, dtype=work.dtype, device=work.device)
    if k == 1:
        return torch.ones(gram.shape[:-1], dtype=gram.dtype, device=gram.device)
    if k == 2:
        return min_norm_2(work).to(gram.dtype)
    if k <= EXACT_MAX_K and init is None:
        return min_norm_exact(work).to(gram.dtype)
    work = work / gram_scale(work)
    x0 = torch.full(work.shape[:-1], 1.0 / k, dtype=work.dtype, device=work.device) if init is None else init.to(work)

    def fun(lam):
        glam = (work @ lam.unsqueeze(-1)).squeeze(-1)
        return 0.5 * (lam * glam).sum(-1), glam

    # 1/trace ≤ 1/λ_max is a safe first step; the line search grows it.
    step0 = 1.0 / torch.diagonal(work, dim1=-2, dim2=-1).sum(-1)
    lam = minimize_on_simplex(fun, x0, step0, max_iter=max_iter, tol=tol)
    return lam.to(gram.dtype)


def min_norm_gap(gram: torch.Tensor, lam: torch.Tensor, rho: float = 0.0) -> torch.Tensor:
    """KKT residual of ``lam`` for :func:`min_norm`: the Frank–Wolfe gap on G/s (s = max diag)."""
    k = gram.shape[-1]
    work = gram.to(torch.float64) + rho * torch.eye(k, dtype=torch.float64, device=gram.device)
    work = work / gram_scale(work)
    lam = lam.to(torch.float64)
    return fw_gap(lam, (work @ lam.unsqueeze(-1)).squeeze(-1))
