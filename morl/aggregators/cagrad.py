"""CAGrad (Liu et al. 2021, arXiv 2110.14048, eq. 2 / Alg. 1): conflict-averse gradient descent.

Primal: maximise min_i g_i·d over the ball ‖d − g0‖ ≤ c‖g0‖ around the mean gradient g0. Dual:

    w* = argmin_{w∈Δ_K} g_w·g0 + c‖g0‖ ‖g_w‖,   g_w = Σ_k w_k g_k,   d = g0 + (c‖g0‖ / ‖g_w*‖) g_w*,

divided by 1, 1 + c² or 1 + c (rescale 0, 1, 2). Solved on G + δ diag G (a rounded singular G is
indefinite: spurious stationary points) by support enumeration for K ≤ ``ENUMERATE_MAX_K``, else
active-set steps; the answer is the best on the primal of the dual's d, the mean and (c ≥ 1) 0.
"""

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators._warm_start import WarmStartSolver
from morl.aggregators.base import GramianAggregator
from morl.host_reads import reads_are_free
from morl.solvers.gramian import definite_ridge
from morl.solvers.min_norm import RIDGE, ZERO_ROW, equilibrate, min_norm_solve, quad, restricted, support_masks
from morl.solvers.simplex import fw_gap

ENUMERATE_MAX_K = 10  # up to here all 2^K − 1 supports are scored in one batched solve


def _dual_terms(gram: torch.Tensor, c: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(G + δ diag G, b = G1/K, r = c‖g0‖ [..., 1], δ [..., 1, 1])`` in float64 on G / max diag
    (the dual is homogeneous in G; δ from :func:`definite_ridge` makes it positive definite)."""
    g = gram.to(torch.float64)
    top = torch.diagonal(g, dim1=-2, dim2=-1).amax(-1, keepdim=True).unsqueeze(-1)
    g = g / torch.where(top > 0, top, 1.0)
    b = g.mean(-1)
    ridge = definite_ridge(g, gram.dtype).clamp_min(RIDGE)
    diag = torch.diagonal(g, dim1=-2, dim2=-1)
    g = g + ridge * torch.diag_embed(torch.where(diag > ZERO_ROW, diag, 1.0))
    return g, b, c * torch.sqrt(b.mean(-1, keepdim=True).clamp(min=0.0)), ridge


def cagrad_dual_solve(gram, c: float, max_iter: int = 100, tol: float = 1e-10, init=None):
    """``(weights of d before the rescale, w*, converged)`` for a normalised ``gram``; converged is
    False where neither the active-set steps nor the duality gap (:func:`_certified`) reach ``tol``."""
    g, b, r, ridge = _dual_terms(gram, c)
    if b.shape[-1] <= ENUMERATE_MAX_K:
        w = _enumerated_optimum(g, b, r)
        exact = torch.ones(b.shape[:-1], dtype=torch.bool, device=b.device)
        return primal_weights(g, r, w, c, ridge, gram.dtype), w, exact
    tol = tol * (b.abs().amax(-1) + r.squeeze(-1) + 1e-12)  # the gap's units (floored for G = 0)
    w = _dropped_negatives_start(g, b, r, rounds=b.shape[-1]) if init is None else init.to(g)
    if c >= 1.0:  # the min-norm point: the optimum where the rows are Pareto stationary
        w_mn = min_norm_solve(g)[0]
        w = torch.where((dual_objective(g, b, r, w_mn) < dual_objective(g, b, r, w)).unsqueeze(-1), w_mn, w)
    w, converged = _active_set_steps(g, b, r, w, tol, rounds=max_iter)
    out = primal_weights(g, r, w, c, ridge, gram.dtype)
    return out, w, converged | _certified(g, b, r, w, out, ridge, tol)


def _dropped_negatives_start(g, b, r, rounds: int) -> torch.Tensor:
    """The stationary point on the rows left after dropping negative weights until none is (uniform if none is left)."""
    support = torch.ones(b.shape, dtype=g.dtype, device=g.device)
    for _ in range(rounds):
        negative = (support > 0) & (_stationary_on(g, b, r, support.unsqueeze(-2))[0].squeeze(-2) < 0)
        support = torch.where(negative, 0.0, support)
        if reads_are_free(g) and not bool(negative.any()):
            break
    w, feasible = _support_candidates(g, b, r, support.unsqueeze(-2))
    return torch.where(feasible, w.squeeze(-2), 1.0 / b.shape[-1])


def dual_objective(g, b, r, w) -> torch.Tensor:
    """w·b + r sqrt(wᵀGw) for weights ``w`` [..., K]."""
    return (w * b).sum(-1) + r.squeeze(-1) * quad(g, w).clamp(min=0.0).sqrt()


def _certified(g, b, r, w, out, ridge, tol) -> torch.Tensor:
    """Where the duality gap (dual at ``w`` − primal at ``out``) ≤ ``tol`` + the ±2δ Σ w_k²‖g_k‖² rounding
    of ‖g_w‖²: certifies an optimum of 0 (Pareto stationary, c ≥ 1), where no gradient exists."""
    sq = quad(g, w).clamp(min=0.0).unsqueeze(-1)
    spread = 2 * ridge.squeeze(-1) * (w.square() * torch.diagonal(g, dim1=-2, dim2=-1)).sum(-1, keepdim=True)
    unknown = r * (sq.sqrt() - (sq - spread).clamp(min=0.0).sqrt())
    primal = (g @ out.unsqueeze(-1)).squeeze(-1).amin(-1, keepdim=True)
    return (dual_objective(g, b, r, w).unsqueeze(-1) - primal <= tol.unsqueeze(-1) + unknown).squeeze(-1)


def _active_set_steps(g, b, r, w, tol, rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w, done)``, done where the Frank–Wolfe gap is ≤ ``tol``. Each round, with v the stationary
    point on the support's hull: a major step to v (v ≥ 0; the row of least gradient enters unless
    done), a minor step towards v until a weight hits 0 (that row leaves), or, where the dual is
    unbounded on the hull (c < 1), a ray step along u until one does. g_w = 0 stays undone."""
    support = w > 0
    done = torch.zeros(w.shape[:-1], dtype=torch.bool, device=w.device)
    stuck = torch.zeros_like(done)
    for _ in range(rounds):
        v, total, ray = _stationary_on(g, b, r, support.to(g.dtype).unsqueeze(-2))
        v, total, ray = v[..., 0, :], total[..., 0, 0], ray[..., 0, :]
        ok = (total > 0) & torch.isfinite(v).all(-1) & ~done & ~stuck
        major = ok & ((v >= 0) | ~support).all(-1)
        v_major = v.clamp_min(0)
        gw = (g @ v_major.unsqueeze(-1)).squeeze(-1)  # the gradient b + r g_w/‖g_w‖; +inf where g_w = 0
        sq = (v_major * gw).sum(-1, keepdim=True)
        safe_sq = torch.where(sq > 0, sq, 1.0)
        grad = torch.where(sq > 0, b + r * gw / safe_sq.sqrt(), float("inf"))
        finished = major & (fw_gap(v_major, grad) <= tol)
        enter = torch.where(support, float("inf"), grad).argmin(-1, keepdim=True)
        ratio = torch.where(support & (v < 0), w / (w - v), float("inf"))
        theta = ratio.amin(-1, keepdim=True).clamp(0.0, 1.0)
        minor = ok & ~major
        w_minor = _drop_blocking(w + theta * (v - w), ratio)
        blocked = support & (ray < 0)  # Σu = 0, so some u_i < 0 blocks the ray
        unbounded = ~ok & ~done & ~stuck & torch.isfinite(ray).all(-1) & blocked.any(-1)
        safe_ray = torch.where(blocked, ray, -1.0)
        ratio_ray = torch.where(blocked, w / -safe_ray, float("inf"))
        step_ray = torch.where(unbounded.unsqueeze(-1), ratio_ray.amin(-1, keepdim=True), 0.0)
        w_ray = _drop_blocking(w + step_ray * ray, ratio_ray)
        w_moved = torch.where(minor.unsqueeze(-1), w_minor, w_ray)
        moved = minor | unbounded
        w = torch.where(major.unsqueeze(-1), v_major, torch.where(moved.unsqueeze(-1), w_moved, w))
        entering = torch.zeros_like(support).scatter(-1, enter, True) & (major & ~finished).unsqueeze(-1)
        support = torch.where(moved.unsqueeze(-1), w_moved > 0, support | entering)
        stuck = stuck | ~(ok | done | unbounded) | (minor & (theta.squeeze(-1) <= 0))
        done = done | finished
        if reads_are_free(g) and bool((done | stuck).all()):
            break
    return w, done


def _drop_blocking(w, ratio) -> torch.Tensor:
    """``w`` with the row of least ``ratio`` (the one that blocked the step) set to 0, on the simplex."""
    w = w.scatter(-1, ratio.argmin(-1, keepdim=True), 0.0).clamp_min(0)
    return w / w.sum(-1, keepdim=True)


def _stationary_on(g, b, r, m) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(w, 1ᵀv, u)`` on each support S of ``m``: stationarity b_S + r G_SS w/‖g_w‖ = ν1 gives
    w ∝ v = G⁻¹(ν1 − b) with Aν² − 2Bν + C − r² = 0 (A = 1ᵀG⁻¹1, B = 1ᵀG⁻¹b, C = bᵀG⁻¹b), the
    larger root. u = (B/A)G⁻¹1 − G⁻¹b (Σu = 0) is a descent ray where B² < A(C − r²) (no root)."""
    g_hat, dn = equilibrate(g, 0.0)  # g is positive definite already
    a = restricted(g_hat.unsqueeze(-3), m)
    dn = dn.unsqueeze(-2)
    sol = torch.linalg.solve(a, torch.stack([m / dn, m * b.unsqueeze(-2) / dn], dim=-1)) / dn.unsqueeze(-1)
    g_inv_1, g_inv_b = sol[..., 0], sol[..., 1]
    big_a, big_b, big_c = (m * g_inv_1).sum(-1), (m * g_inv_b).sum(-1), (m * b.unsqueeze(-2) * g_inv_b).sum(-1)
    safe_a = torch.where(big_a != 0, big_a, 1.0)
    nu = (big_b + torch.sqrt((big_b.square() - big_a * (big_c - r.square())).clamp(min=0.0))) / safe_a
    v = nu.unsqueeze(-1) * g_inv_1 - g_inv_b
    total = v.sum(-1, keepdim=True)
    # one Newton step on vᵀGv = r²: the root loses digits to cancellation, vᵀGv does not
    quad_v = (v * (v.unsqueeze(-2) @ g.unsqueeze(-3)).squeeze(-2)).sum(-1, keepdim=True)
    safe_total = torch.where(total > 0, total, 1.0)
    v = v - (quad_v - r.unsqueeze(-1).square()) / (2 * safe_total) * (total > 0) * g_inv_1
    total = v.sum(-1, keepdim=True)
    ray = (big_b / safe_a).unsqueeze(-1) * g_inv_1 - g_inv_b
    return v / torch.where(total > 0, total, 1.0), total, ray


def _support_candidates(g, b, r, m) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w, feasible)``: the dual's stationary point on each support of ``m`` ([..., S, K]), on the simplex."""
    w, total, _ = _stationary_on(g, b, r, m)
    feasible = (w >= -1e-12).all(-1) & (total.squeeze(-1) > 0) & torch.isfinite(w).all(-1)
    w = w.clamp_min(0.0)
    w = torch.where(feasible.unsqueeze(-1), w / w.sum(-1, keepdim=True).clamp_min(1e-300), 0.0)
    single = m.sum(-1, keepdim=True) == 1  # a single row is its own stationary point (1ᵀv = 0 when r = 0)
    return torch.where(single, m.expand_as(w), w), feasible | single.squeeze(-1)


def _enumerated_optimum(g, b, r) -> torch.Tensor:
    """w* of the dual by scoring the stationary point of every support."""
    k = g.shape[-1]
    w, feasible = _support_candidates(g, b, r, support_masks(k, g.device))
    obj = dual_objective(g.unsqueeze(-3), b.unsqueeze(-2), r.unsqueeze(-1), w)
    best = torch.where(feasible, obj, float("inf")).argmin(-1, keepdim=True)
    return torch.gather(w, -2, best.unsqueeze(-1).expand(*best.shape, k)).squeeze(-2)


def primal_weights(g, r, w, c: float, ridge: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Weights of d = g0 + (r/‖g_w‖) g_w, or of the mean or (c ≥ 1) 0 where those score better. G is
    known to ±e‖g_i‖‖g_j‖, e = max(ε, δ/K): d uses low r over high ‖g_w‖ (it stays in the ball) and
    loses to the mean where the mean beats its best reading, to 0 unless its worst one is > 0."""
    k = g.shape[-1]
    norms = torch.diagonal(g, dim1=-2, dim2=-1).div(1.0 + ridge.squeeze(-1)).sqrt()
    entry = (ridge.squeeze(-1) / k).clamp_min(torch.finfo(dtype).eps)
    gw_norm = (
        quad(g, w).clamp(min=0.0).unsqueeze(-1) + entry * (norms * w.abs()).sum(-1, keepdim=True).square()
    ).sqrt()
    r_low = (r.square() - c**2 * entry * norms.mean(-1, keepdim=True).square()).clamp(min=0.0).sqrt()
    dual = 1.0 / k + r_low / torch.where(gw_norm > 0, gw_norm, 1.0) * w
    mean = torch.full_like(dual, 1.0 / k)

    def gains(v, sign=0.0):  # each task's gain (Gv)_i, ± its rounding 4e‖g_i‖ Σ_j ‖g_j‖|v_j|
        return (
            (g @ v.unsqueeze(-1)).squeeze(-1) + sign * 4 * entry * norms * (norms * v.abs()).sum(-1, keepdim=True)
        ).amin(-1, keepdim=True)

    out = torch.where(gains(mean) > gains(dual, 1.0), mean, dual)
    if c >= 1.0:  # 0 is in the ball and scores 0
        out = torch.where(gains(out, -1.0) > 0, out, 0.0)
    return out


class CAGrad(WarmStartSolver, GramianAggregator):
    """Conflict-averse gradient. Options: ``c`` (0.5): the ball's radius over ‖g0‖ (0: the mean).
    ``rescale`` (1): divide d by 1, 1 + c², 1 + c (0, 1, 2; 1 as the reference code).
    ``max_iter`` (100), ``tol`` (1e-10, relative Frank–Wolfe gap), ``warm_start`` (False): the K > 10 solve."""

    _REPR = ("c", "rescale")

    def __init__(
        self,
        c: float = 0.5,
        rescale: int = 1,
        max_iter: int = 100,
        tol: float = 1e-10,
        warm_start: bool = False,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self.c = check_number("CAGrad", "c", c)
        check_choice("CAGrad", "rescale", rescale, (0, 1, 2))
        self.rescale = rescale
        self._init_solver("CAGrad", max_iter, tol, warm_start)

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        init = self._start(gram.shape[-1])
        w, w_dual, converged = cagrad_dual_solve(gram, self.c, self.max_iter, self.tol, init=init)
        self._count_not_converged(converged)
        self._remember(w_dual)
        return (w / (1.0, 1.0 + self.c**2, 1.0 + self.c)[self.rescale]).to(gram.dtype)
