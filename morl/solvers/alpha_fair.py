"""α-fair weights: w > 0 with G w = w^(−1/a) on the K×K Gramian (Nash-MTL: a = 1, arXiv 2202.01017
Sec. 3; FairGrad: arXiv 2402.15638 eq. 4).

The condition is the stationarity of the strictly convex potential f(w) = ½ wᵀGw − Σ_i h(w_i),
h'(w) = w^(−1/a) (h = log for a = 1), solved by Newton's method with a batched line search over
fixed step lengths. A solution exists iff the point is not Pareto stationary; a relative ridge
ρ·G_ii (:func:`morl.solvers.min_norm.ridge_for`) keeps f bounded, and where it carries at least
half of some row's condition (ρ G_ii w_i ≥ ½ w_i^(−1/a)) the point is reported stationary (d = 0).
"""

import torch

from morl.host_reads import reads_are_free
from morl.solvers.gramian import gram_scale
from morl.solvers.min_norm import ZERO_ROW, ridge_for

#: line-search steps 2^3 .. 2^−30 and 0; steps above 1 reach far-out solutions fast
STEP_POWERS = (3, -31)
#: A row whose ridge term is at least this share of its condition is decided by rounding.
STATIONARY_SHARE = 0.5


def _h_increment(w: torch.Tensor, y: torch.Tensor, a: float) -> torch.Tensor:
    """h(w(1 + y)) − h(w) − h'(w)·w·y for y > −1, without cancellation (y may be tiny)."""
    if a == 1.0:
        return torch.log1p(y) - y
    c = 1.0 - 1.0 / a
    return w.pow(c) * (torch.expm1(c * torch.log1p(y)) / c - y)


def _ray_rescale(gram_r: torch.Tensor, w: torch.Tensor, a: float) -> torch.Tensor:
    """t·w with t = argmin f(t w): t^(1+1/a) = Σ w_i^(1−1/a) / wᵀG_r w (exact along the ray)."""
    q = (w * (gram_r @ w.unsqueeze(-1)).squeeze(-1)).sum(-1, keepdim=True)
    s = w.pow(1.0 - 1.0 / a).sum(-1, keepdim=True)
    return w * (s / q.clamp_min(torch.finfo(w.dtype).tiny)).pow(a / (a + 1.0))


def _newton_step(gram_r: torch.Tensor, w: torch.Tensor, a: float, steps: torch.Tensor) -> torch.Tensor:
    """One Newton step on f with the best feasible length from ``steps`` (0 included)."""
    grad = (gram_r @ w.unsqueeze(-1)).squeeze(-1) - w.pow(-1.0 / a)
    hess = gram_r + torch.diag_embed(w.pow(-1.0 / a - 1.0) / a)
    # equilibrated solve: rows whose norms differ by 1e6 are solved as accurately as equal ones
    dn = torch.diagonal(hess, dim1=-2, dim2=-1).sqrt()
    step = -torch.linalg.solve(hess / (dn.unsqueeze(-1) * dn.unsqueeze(-2)), (grad / dn).unsqueeze(-1)).squeeze(-1) / dn
    # f(w + sΔ) − f(w) = s gradᵀΔ + ½ s² ΔᵀG_rΔ − Σ [h(w + sΔ) − h(w) − s h'(w)Δ], per step s
    s = steps.view(-1, *([1] * w.dim()))  # [S, ..., 1]
    lin = (grad * step).sum(-1, keepdim=True)
    quad = (step * (gram_r @ step.unsqueeze(-1)).squeeze(-1)).sum(-1, keepdim=True)
    y = s * (step / w)
    feasible = (y > -1).all(-1, keepdim=True)
    rest = _h_increment(w, torch.where(y > -1, y, 0.0), a).sum(-1, keepdim=True)
    change = s * lin + 0.5 * s * s * quad - rest
    change = torch.where(feasible & torch.isfinite(change), change, float("inf"))
    best = change.argmin(0, keepdim=True)  # [1, ..., 1]
    return w + torch.gather(s.expand_as(change), 0, best).squeeze(0) * step


def alpha_fair_solve(
    gram: torch.Tensor,
    a: float = 1.0,
    max_iter: int = 50,
    tol: float = 1e-8,
    init: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(w, converged, stationary)`` for ``gram`` [..., K, K] (any scale; float64): w in G's units,
    converged where max_i |w_i^(1/a) (G_r w)_i − 1| ≤ ``tol``; ``init`` is used where positive."""
    g = gram.to(torch.float64)
    scale = gram_scale(g)
    g = g / scale
    diag = torch.diagonal(g, dim1=-2, dim2=-1)
    ridge = ridge_for(gram.dtype) * torch.where(diag > ZERO_ROW, diag, 1.0)  # zero rows: ρ·(max diag)
    gram_r = g + torch.diag_embed(ridge)
    w = torch.diagonal(gram_r, dim1=-2, dim2=-1).rsqrt()  # exact for orthogonal rows (a = 1)
    if init is not None:
        init = init.to(w).expand_as(w)
        usable = (init > 0).all(-1, keepdim=True) & torch.isfinite(init).all(-1, keepdim=True)
        w = torch.where(usable, init, w)
    w = _ray_rescale(gram_r, w, a)
    powers = torch.arange(STEP_POWERS[0], STEP_POWERS[1], -1, dtype=w.dtype, device=w.device)
    steps = torch.cat([torch.exp2(powers), powers.new_zeros(1)])
    for _ in range(max_iter):
        w = _ray_rescale(gram_r, _newton_step(gram_r, w, a, steps), a)
        if reads_are_free(w) and bool(((_residual(gram_r, w, a) <= tol) | _stationary(ridge, w, a)).all()):
            break
    stationary = _stationary(ridge, w, a)
    # at a stationary point the residual stalls at rounding level, but d = 0 is not in doubt
    converged = (_residual(gram_r, w, a) <= tol) | stationary
    w = w * scale.squeeze(-1).pow(-a / (a + 1.0))
    return w, converged, stationary


def _residual(gram_r: torch.Tensor, w: torch.Tensor, a: float) -> torch.Tensor:
    """[...]: max_i |w_i^(1/a) (G_r w)_i − 1|, the relative violation of the α-fair condition."""
    gw = (gram_r @ w.unsqueeze(-1)).squeeze(-1)
    return (w.pow(1.0 / a) * gw - 1.0).abs().amax(-1)


def _stationary(ridge: torch.Tensor, w: torch.Tensor, a: float) -> torch.Tensor:
    """[...]: some row's condition is carried by the ridge, ρG_ii w_i ≥ ½ w_i^(−1/a)."""
    return (ridge * w.pow(1.0 + 1.0 / a)).amax(-1) >= STATIONARY_SHARE
