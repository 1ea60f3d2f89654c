"""Min-norm point of the convex hull of K gradients, from their K×K Gramian (MGDA's subproblem).

    λ* = argmin_{λ∈Δ_K} ½ λᵀGλ (+ ρ/2 ‖λ‖²),    d = Σ_k λ*_k g_k.

K = 2 has a closed form; larger K runs Wolfe's active-set method (Wolfe 1976, "Finding the nearest
point in a polytope"). Solved in float64 on D⁻¹GD⁻¹ (D = diag ‖g_k‖) plus :func:`ridge_for`'s ridge.
"""

import torch

from morl.host_reads import reads_are_free
from morl.solvers.gramian import gram_scale
from morl.solvers.simplex import fw_gap

EPS_2 = 1e-8  # the reference code's denominator guard in the K = 2 closed form
RIDGE = 1e-12  # smallest relative ridge (float64 Gramians), in units of each row's squared norm
TIE = 1e-9  # candidate objectives within TIE (relative) of the best are tied (enumerating solvers)
ZERO_ROW = 1e-300  # squared row norms below this (on G / max diag) count as zero rows


def ridge_for(dtype: torch.dtype) -> float:
    """The relative ridge for a Gramian held in ``dtype``: 16 rounding units (float32: 1.9e-6)."""
    return max(RIDGE, 16 * torch.finfo(dtype).eps)


def equilibrate(gram: torch.Tensor, ridge: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(D⁻¹GD⁻¹ + ridge·I, d)`` with d_k = ‖g_k‖ (1 for zero rows): a unit-diagonal system."""
    diag = torch.diagonal(gram, dim1=-2, dim2=-1)
    d = torch.where(diag > ZERO_ROW, diag, 1.0).sqrt()
    eye = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
    return gram / (d.unsqueeze(-1) * d.unsqueeze(-2)) + ridge * eye, d


def support_masks(k: int, device: torch.device) -> torch.Tensor:
    """All 2^k − 1 non-empty supports as a float64 mask matrix ``[S, k]``."""
    idx = torch.arange(1, 2**k, device=device)
    return ((idx.unsqueeze(-1) >> torch.arange(k, device=device)) & 1).to(torch.float64)


def restricted(g_hat: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``g_hat`` on the mask(s) ``m`` with the identity outside: solving it applies G_SS⁻¹ on S, 0 elsewhere."""
    return m.unsqueeze(-1) * g_hat * m.unsqueeze(-2) + torch.diag_embed(1 - m)


def quad(gram: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """λᵀGλ over the last dim, batched (``gram`` broadcasts over ``lam``'s extra dims)."""
    return ((lam.unsqueeze(-2) @ gram).squeeze(-2) * lam).sum(-1)


def _on_simplex(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x / Σx, Σx > 0 and finite)``."""
    total = x.sum(-1, keepdim=True)
    ok = (total > 0) & torch.isfinite(total)
    return x / torch.where(ok, total, 1.0), ok.squeeze(-1)


def min_norm_2(gram: torch.Tensor, eps: float = EPS_2) -> torch.Tensor:
    """Closed-form K = 2 weights (the reference code's): on G / max diag, λ = (g22 − g12)/(g11 + g22 −
    2g12 + eps) if g12 < min(g11, g22), else 1 if g11 < g22 else 0; weights (λ, 1 − λ). eps = 0 is exact."""
    return _min_norm_2(gram / gram_scale(gram), eps)


def _min_norm_2(g: torch.Tensor, eps: float) -> torch.Tensor:
    g11, g22, g12 = g[..., 0, 0], g[..., 1, 1], g[..., 0, 1]
    denom = g11 + g22 - 2 * g12 + eps
    inner = (g22 - g12) / torch.where(denom > 0, denom, 1.0)
    lam = torch.where(g12 < torch.minimum(g11, g22), inner, (g11 < g22).to(g.dtype)).clamp(0.0, 1.0)
    return torch.stack([lam, 1 - lam], dim=-1)


def kkt_violation(gram_r: torch.Tensor, lam: torch.Tensor, tol: float) -> torch.Tensor:
    """[..., K]: how far (Gλ)_k ≥ λᵀGλ fails, beyond ``tol``·‖g_k‖‖d‖ and float64 rounding (> 0: row k shortens d)."""
    grad = (gram_r @ lam.unsqueeze(-1)).squeeze(-1)
    f = (lam * grad).sum(-1, keepdim=True).clamp_min(0)
    diag = torch.diagonal(gram_r, dim1=-2, dim2=-1)
    return (
        (f - grad)
        - tol * (diag * f).sqrt()
        - 8 * lam.shape[-1] * torch.finfo(torch.float64).eps * (diag.sqrt() + f.sqrt())
    )


def wolfe_steps(g_hat, d, lam, tol: float, rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(λ, converged)`` from the feasible ``lam``: major steps to the affine minimiser y on the support
    (y ≥ 0) add the most violating row; minor steps towards y drop the row whose weight hits 0."""
    gram_r = g_hat * (d.unsqueeze(-1) * d.unsqueeze(-2))  # G + ridge·D², the problem solved
    support = lam > 0
    done = torch.zeros(lam.shape[:-1], dtype=torch.bool, device=lam.device)
    for _ in range(rounds):
        m = support.to(lam.dtype)
        y, ok = _on_simplex(m * torch.linalg.solve(restricted(g_hat, m), m / d) / d)  # y ∝ G_SS⁻¹1
        major = ok & ((y >= 0) | ~support).all(-1) & ~done
        viol = torch.where(support, -1.0, kkt_violation(gram_r, y.clamp_min(0), tol))
        enter = viol.argmax(-1, keepdim=True)
        adds = major & (viol.gather(-1, enter).squeeze(-1) > 0)
        ratio = torch.where(support & (y < 0), lam / (lam - y), float("inf"))
        theta = ratio.amin(-1, keepdim=True).clamp(0.0, 1.0)
        minor = ok & ~major & ~done
        lam_minor, _ = _on_simplex(
            (lam + theta * (y - lam)).scatter(-1, ratio.argmin(-1, keepdim=True), 0.0).clamp_min(0)
        )
        lam = torch.where(major.unsqueeze(-1), y.clamp_min(0), torch.where(minor.unsqueeze(-1), lam_minor, lam))
        entering = torch.zeros_like(support).scatter(-1, enter, True) & adds.unsqueeze(-1)
        support = torch.where(minor.unsqueeze(-1), lam_minor > 0, support | entering)
        done = done | (major & ~adds)
        if reads_are_free(lam) and bool(done.all()):
            break
    return lam, done


def min_norm_solve(gram, rho: float = 0.0, max_iter: int = 500, tol: float = 1e-8, init=None, eps_2: float = EPS_2):
    """``(λ, converged)``: the min-norm weights and where no row violates optimality by more than
    ``tol``·‖g_k‖‖d‖ within min(max_iter, 4K + 10) Wolfe rounds. ``rho`` is in G's units; ``eps_2`` the K = 2 guard."""
    k = gram.shape[-1]
    work = gram.to(torch.float64)
    if rho:
        work = work + rho * torch.eye(k, dtype=torch.float64, device=gram.device)
    work = work / gram_scale(work)
    done = torch.ones(gram.shape[:-2], dtype=torch.bool, device=gram.device)
    if k == 1:
        return torch.ones(gram.shape[:-1], dtype=gram.dtype, device=gram.device), done
    if k == 2:  # work is on G / max diag already
        return _min_norm_2(work, eps_2).to(gram.dtype), done
    g_hat, d = equilibrate(work, ridge_for(gram.dtype))
    if init is None:  # the affine minimiser on all rows, its negative weights cut off
        start, ok = _on_simplex(torch.linalg.solve(g_hat, 1 / d) / d)
        start, _ = _on_simplex(torch.where(ok.unsqueeze(-1), start.clamp_min(0), 1.0))
    else:
        start, _ = _on_simplex(init.to(work).clamp_min(0))
    lam, done = wolfe_steps(g_hat, d, start, tol, rounds=min(max_iter, 4 * k + 10))
    return lam.to(gram.dtype), done


def min_norm(gram, rho: float = 0.0, max_iter: int = 500, tol: float = 1e-8, init=None) -> torch.Tensor:
    """The weights of :func:`min_norm_solve`."""
    return min_norm_solve(gram, rho, max_iter, tol, init)[0]


def min_norm_gap(gram: torch.Tensor, lam: torch.Tensor, rho: float = 0.0) -> torch.Tensor:
    """The Frank–Wolfe gap of ``lam`` for :func:`min_norm` on G / max diag."""
    work = gram.to(torch.float64) + rho * torch.eye(gram.shape[-1], dtype=torch.float64, device=gram.device)
    work = work / gram_scale(work)
    lam = lam.to(torch.float64)
    return fw_gap(lam, (work @ lam.unsqueeze(-1)).squeeze(-1))
