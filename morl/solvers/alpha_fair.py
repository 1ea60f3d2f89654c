"""α-fair weights: w > 0 with G w = w^(−1/a), from the K×K Gramian (Nash-MTL: a = 1; FairGrad).

The bargaining / α-fair condition (a = 1: Navon et al., ICML 2022, arXiv 2202.01017, Sec. 3,
the Nash bargaining solution; Ban & Ji, ICML 2024, arXiv 2402.15638, eq. (4)) is the stationarity
condition of the strictly convex potential

    f(w) = ½ wᵀGw − Σ_i h(w_i),   h'(w) = w^(−1/a)   (h = log for a = 1),

over w > 0 (G ⪰ 0 and −h is strictly convex for a > 0). So instead of the authors' sequence of
exponential-cone programs (Nash-MTL's concave-convex procedure, cvxpy/ECOS) or FairGrad's
scipy ``least_squares``, this module runs Newton's method on f: f is self-concordant for a = 1
(quadratic + log barrier), so Newton with a line search converges from any positive start and
quadratically near the solution. Each iteration is one K×K solve plus a batched line search
over a fixed grid of step lengths (no host sync); on CPU the loop exits once converged.

A solution exists iff no positive combination of the rows vanishes (the point is not Pareto
stationary): along a null direction v ≥ 0 of G, f → −∞. A relative ridge ρ·G_ii (ρ a few
rounding units of G's dtype, :func:`morl.solvers.min_norm.ridge_for`) keeps f bounded below;
where the ridge carries at least half of some row's condition, ρ G_ii w_i ≥ ½ w_i^(−1/a), the
answer is decided by rounding and the point is reported as stationary (the bargaining
problem's disagreement point, d = 0). Everywhere else (G w)_i ≥ ½ w_i^(−1/a) > 0: the
direction Σ w_k g_k conflicts with no objective.
"""

from __future__ import annotations

import torch

from morl.host_reads import reads_are_free
from morl.solvers.gramian import gram_scale
from morl.solvers.min_norm import ZERO_ROW, ridge_for

#: Step lengths tried by the line search: 2^3 down to 2^−30, and 0 (never go uphill). Steps
#: above 1 let the iterate grow fast where the solution is far out (near-stationary points).
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
    tiny = torch.finfo(w.dtype).tiny
    return w * (s / q.clamp_min(tiny)).pow(a / (a + 1.0))


def _newton_step(gram_r: torch.Tensor, w: torch.Tensor, a: float, steps: torch.Tensor) -> torch.Tensor:
    """One Newton step on f with the best feasible length from ``steps`` (0 included)."""
    gw = (gram_r @ w.unsqueeze(-1)).squeeze(-1)
    grad = gw - w.pow(-1.0 / a)
    hess = gram_r + torch.diag_embed(w.pow(-1.0 / a - 1.0) / a)
    # equilibrated solve: rows whose norms differ by 1e6 are solved as accurately as equal ones
    dn = torch.diagonal(hess, dim1=-2, dim2=-1).sqrt()
    step = -torch.linalg.solve(hess / (dn.unsqueeze(-1) * dn.unsqueeze(-2)), (grad / dn).unsqueeze(-1)).squeeze(-1) / dn
    # f(w + sΔ) − f(w) = s gradᵀΔ + ½ s² ΔᵀG_rΔ − Σ [h(w + sΔ) − h(w) − s h'(w)Δ], per step s
    x = step / w
    s = steps.view(-1, *([1] * w.dim()))  # [S, ..., 1]
    lin = (grad * step).sum(-1, keepdim=True)
    quad = (step * (gram_r @ step.unsqueeze(-1)).squeeze(-1)).sum(-1, keepdim=True)
    y = s * x
    feasible = (y > -1).all(-1, keepdim=True)
    rest = _h_increment(w, torch.where(y > -1, y, torch.zeros_like(y)), a).sum(-1, keepdim=True)
    change = s * lin + 0.5 * s * s * quad - rest
    change = torch.where(feasible & torch.isfinite(change), change, torch.full_like(change, float("inf")))
    best = change.argmin(0, keepdim=True)  # [1, ..., 1]
    return w + torch.gather(s.expand_as(change), 0, best).squeeze(0) * step


def alpha_fair_solve(
    gram: torch.Tensor, a: float = 1.0, max_iter: int = 50, tol: float = 1e-8, init: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(w, converged, stationary)`` for ``gram`` [..., K, K] (any scale; solved in float64).

    ``w`` [...,K] solves (G + ridge) w = w^(−1/a) in G's own units (it scales as
    s^(−a/(a+1)) with G = s·Ĝ); ``converged`` [...]: max_i |w_i^(1/a) (G_r w)_i − 1| ≤ ``tol``
    within ``max_iter`` Newton steps; ``stationary`` [...]: the ridge decides some row (see the
    module docstring), so no bargaining solution exists up to rounding. ``init`` (positive
    weights, e.g. the previous call's) is used where it is positive and finite.
    """
    g = gram.to(torch.float64)
    scale = gram_scale(g)
    g = g / scale
    diag = torch.diagonal(g, dim1=-2, dim2=-1)
    rho = ridge_for(gram.dtype)
    ridge = rho * torch.where(diag > ZERO_ROW, diag, torch.ones_like(diag))  # zero rows: ρ·(max diag)
    gram_r = g + torch.diag_embed(ridge)
    w = torch.diagonal(gram_r, dim1=-2, dim2=-1).rsqrt()  # exact for orthogonal rows (a = 1)
    if init is not None:
        init = init.to(w).expand_as(w)
        usable = (init > 0).all(-1, keepdim=True) & torch.isfinite(init).all(-1, keepdim=True)
        w = torch.where(usable, init, w)
    w = _ray_rescale(gram_r, w, a)
    # built on the device (arange), not copied from the host
    powers = torch.arange(STEP_POWERS[0], STEP_POWERS[1], -1, dtype=w.dtype, device=w.device)
    steps = torch.cat([torch.exp2(powers), powers.new_zeros(1)])
    for _ in range(max_iter):
        w = _ray_rescale(gram_r, _newton_step(gram_r, w, a, steps), a)
        if reads_are_free(w) and bool(((_residual(gram_r, w, a) <= tol) | _stationary(ridge, w, a)).all()):
            break
    stationary = _stationary(ridge, w, a)
    # At a stationary point w ~ ρ^(−a/(a+1)) and G_r w is a difference of nearly equal terms:
    # the residual stalls at rounding level (~1e-3 in float64), but the decision (d = 0) is not
    # in doubt there, so only the other solves are held to ``tol``.
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
