"""CAGrad (Liu et al. 2021, arXiv 2110.14048): conflict-averse gradient descent.

Primal (eq. 2 / Alg. 1): maximise min_i g_i·d over the ball ‖d − g0‖ ≤ c‖g0‖ around the
mean gradient g0. Dual over the simplex (what the reference code solves):

    w* = argmin_{w∈Δ_K} g_w·g0 + c‖g0‖ ‖g_w‖,   g_w = Σ_k w_k g_k,
    d  = g0 + (c‖g0‖ / ‖g_w*‖) g_w*,

then divided by 1 (rescale=0), 1 + c² (rescale=1, the reference default) or 1 + c (rescale=2).
Only inner products enter, so the dual is solved on the K×K Gramian, in torch, the same code
on every device: exactly by support enumeration for K ≤ ``ENUMERATE_MAX_K`` (one batched solve
over the 2^K − 1 supports). Above it, active-set steps (Wolfe's major and minor steps, plus a
ray step where the dual is unbounded below on a support's affine hull, possible for c < 1) run
from the stationary point of the rows left once negative weights are dropped.

The dual is solved on G + δ diag G (:func:`_dual_terms`): a float32 Gramian of rank-deficient
rows is indefinite at rounding level, and sqrt(wᵀGw) then has spurious stationary points.
Near a Pareto-stationary point g_w* → 0 and its direction is rounding noise, so the dual's d
can be worse than simple primal-feasible points. :func:`primal_weights` therefore also scores
the mean (always in the ball) and, for c ≥ 1, d = 0 (in the ball, and optimal at a
stationary point), and returns the candidate with the best worst-task inner product.
"""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators._warm_start import WarmStartSolver
from morl.aggregators.base import GramianAggregator
from morl.host_reads import reads_are_free
from morl.solvers.gramian import definite_ridge
from morl.solvers.min_norm import RIDGE, ZERO_ROW, equilibrate, min_norm_solve, quad, restricted, support_masks
from morl.solvers.simplex import fw_gap

RESCALES = (0, 1, 2)
#: Up to this K the dual is solved by enumerating its 2^K − 1 supports in one batched solve.
ENUMERATE_MAX_K = 10
#: floor of the gap's units (an all-zero Gramian), on G / max diag
EPS = 1e-12


def _dual_terms(gram: torch.Tensor, c: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(G + δ diag G in float64, b = G1/K = [g_k·g0], r = c‖g0‖ [..., 1], δ [..., 1, 1])``, G divided
    by its largest diagonal entry: below gram_scale's threshold (~1e-19) its input is not
    normalised, and absolute tolerances would then decide the solve (the dual is homogeneous
    in G). δ (:func:`definite_ridge`) makes the quadratic form positive definite: G is known to
    the rounding of its dtype only, and a singular G rounded indefinite makes sqrt(wᵀGw)
    non-convex, whose spurious stationary points pass the Frank–Wolfe gap check."""
    g = gram.to(torch.float64)
    top = torch.diagonal(g, dim1=-2, dim2=-1).amax(-1, keepdim=True).unsqueeze(-1)
    g = g / torch.where(top > 0, top, torch.ones_like(top))
    b = g.mean(-1)
    ridge = definite_ridge(g, gram.dtype).clamp_min(RIDGE)  # the one regularisation of the dual
    diag = torch.diagonal(g, dim1=-2, dim2=-1)
    g = g + ridge * torch.diag_embed(torch.where(diag > ZERO_ROW, diag, torch.ones_like(diag)))  # as equilibrate
    return g, b, c * torch.sqrt(b.mean(-1, keepdim=True).clamp(min=0.0)), ridge


def cagrad_dual_solve(
    gram: torch.Tensor, c: float, max_iter: int = 100, tol: float = 1e-10, init: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(weights, w*, converged)`` for a normalised ``gram``: d = weights·g before the rescale,
    w* the dual solution on the simplex (``init`` warm-starts the iterative solve), converged
    False where ``max_iter`` ran out before the gap reached ``tol``, the active-set steps did not
    close it, and the duality gap of the answer does not certify it either (:func:`_certified`)."""
    g, b, r, ridge = _dual_terms(gram, c)
    if b.shape[-1] <= ENUMERATE_MAX_K:
        w = _enumerated_optimum(g, b, r)
        return primal_weights(g, r, w, c, ridge, gram.dtype), w, torch.ones(b.shape[:-1], dtype=torch.bool, device=b.device)
    tol = tol * (b.abs().amax(-1) + r.squeeze(-1) + EPS)  # the gap's units
    w, converged = _iterative_dual(g, b, r, c, max_iter, tol, init)
    out = primal_weights(g, r, w, c, ridge, gram.dtype)
    return out, w, converged | _certified(g, b, r, w, out, ridge, tol)


def _iterative_dual(g, b, r, c: float, max_iter: int, tol, init) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w, converged)``: active-set steps from ``init``, or from the stationary point of the rows
    left once the negative weights are dropped; for c ≥ 1 from the min-norm point where that is
    better (the optimum at a Pareto-stationary point, where ‖g_w‖ → 0)."""
    w = _dropped_negatives_start(g, b, r, rounds=b.shape[-1]) if init is None else init.to(g)
    if c >= 1.0:
        w_mn = min_norm_solve(g)[0]
        w = torch.where((dual_objective(g, b, r, w_mn) < dual_objective(g, b, r, w)).unsqueeze(-1), w_mn, w)
    return _active_set_steps(g, b, r, w, tol, rounds=max_iter)


def _dropped_negatives_start(g, b, r, rounds: int) -> torch.Tensor:
    """The stationary point on all K rows, then on the rows left after dropping every negative
    weight, until none is negative (uniform weights where no support is left feasible)."""
    support = torch.ones(b.shape, dtype=g.dtype, device=g.device)
    for _ in range(rounds):
        negative = (support > 0) & (_stationary_on(g, b, r, support.unsqueeze(-2))[0].squeeze(-2) < 0)
        support = torch.where(negative, torch.zeros_like(support), support)
        if reads_are_free(g) and not bool(negative.any()):
            break
    w, feasible = _support_candidates(g, b, r, support.unsqueeze(-2))
    return torch.where(feasible, w.squeeze(-2), torch.full_like(b, 1.0 / b.shape[-1]))


def dual_objective(g, b, r, w) -> torch.Tensor:
    """g_w·g0 + r‖g_w‖ = w·b + r sqrt(wᵀGw) for weights ``w`` [..., K] (extra dims broadcast)."""
    return (w * b).sum(-1) + r.squeeze(-1) * quad(g, w).clamp(min=0.0).sqrt()


def _certified(g, b, r, w, out, ridge, tol) -> torch.Tensor:
    """Where the duality gap of the answer is ≤ ``tol`` beyond what G's rounding leaves open.

    Weak duality: min_i g_i·d ≤ w·b + r‖g_w‖ for every d in the ball, so the dual value at
    ``w`` minus the primal value of ``out`` (its weights) bounds how far ``out`` is from the
    optimum. ‖g_w‖² is known to ±2δ Σ w_k²‖g_k‖² only (δ = ``ridge``, ≥ G's rounding), so
    r‖g_w‖ to r(‖g_w‖ − sqrt(‖g_w‖² − 2δ…)): up to r sqrt(δ)‖w‖ where g_w is rounding noise,
    as at a Pareto-stationary point with c ≥ 1 (optimum 0, where the gradient gap cannot
    certify anything: ‖g_w‖ → 0 makes it blow up)."""
    sq = quad(g, w).clamp(min=0.0).unsqueeze(-1)
    spread = 2 * ridge.squeeze(-1) * (w.square() * torch.diagonal(g, dim1=-2, dim2=-1)).sum(-1, keepdim=True)
    unknown = r * (sq.sqrt() - (sq - spread).clamp(min=0.0).sqrt())
    dual = dual_objective(g, b, r, w).unsqueeze(-1)
    primal = (g @ out.unsqueeze(-1)).squeeze(-1).amin(-1, keepdim=True)
    return (dual - primal <= tol.unsqueeze(-1) + unknown).squeeze(-1)


def _exact_gradient(g, b, r, w) -> torch.Tensor:
    """∇ of g_w·g0 + r‖g_w‖; where ‖g_w‖ = 0 it is not differentiable and the gradient is made
    +inf (the gap check fails)."""
    gw = (g @ w.unsqueeze(-1)).squeeze(-1)
    sq = (w * gw).sum(-1, keepdim=True)
    norm = torch.where(sq > 0, sq, torch.ones_like(sq)).sqrt()
    return torch.where(sq > 0, b + r * gw / norm, torch.full_like(gw, float("inf")))


def _active_set_steps(g, b, r, w, tol, rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Active-set steps on the dual from the feasible ``w`` (CPU: reads flags): ``(w, done)``,
    done where the Frank–Wolfe gap is ≤ ``tol`` (the units of ``b``).

    As Wolfe's steps for the min-norm point (:func:`morl.solvers.min_norm.wolfe_steps`), one
    :func:`_active_set_round` at a time. Unlike the min-norm problem, the dual can be unbounded
    below on a support's affine hull (|g0·g_u| > r‖g_u‖ along some u with Σu = 0, possible for
    c < 1); there a ray step follows the unbounded direction (:func:`_active_set_round`). An
    entry whose optimum has g_w = 0 stops undone (no gradient there to certify it); the duality
    gap of the caller's answer may certify it instead (:func:`_certified`).
    """
    support = w > 0
    done = torch.zeros(w.shape[:-1], dtype=torch.bool, device=w.device)
    stuck = torch.zeros_like(done)
    for _ in range(rounds):
        w, support, done, stuck = _active_set_round(g, b, r, w, support, done, stuck, tol)
        if reads_are_free(g) and bool((done | stuck).all()):  # elsewhere all rounds run
            break
    return w, done


def _active_set_round(g, b, r, w, support, done, stuck, tol):
    """One step: ``(w, support, done, stuck)``. The objective is convex, so its stationary point
    v on the affine hull of the support S is no worse than w. A major step (v ≥ 0 on S) moves
    there and, unless its gap is ≤ ``tol``, adds the row of least gradient (the one that lowers
    the objective most); a minor step moves towards v until a weight hits 0 and drops that row.
    Where the objective is unbounded below on the hull (no v), a ray step moves along the
    direction u of :func:`_stationary_on` (asymptotic slope < 0, so the convex objective falls
    all along it) until a weight hits 0, and drops that row. Entries done or stuck stay."""
    v, total, ray = _stationary_on(g, b, r, support.to(g.dtype).unsqueeze(-2))
    v, total, ray = v[..., 0, :], total[..., 0, 0], ray[..., 0, :]
    ok = (total > 0) & torch.isfinite(v).all(-1) & ~done & ~stuck
    major = ok & ((v >= 0) | ~support).all(-1)
    v_major = v.clamp_min(0)  # v sums to 1 and is 0 off S
    grad = _exact_gradient(g, b, r, v_major)
    finished = major & (fw_gap(v_major, grad) <= tol)
    enter = torch.where(support, torch.full_like(grad, float("inf")), grad).argmin(-1, keepdim=True)
    # minor step: the largest θ ∈ [0, 1] keeping w + θ(v − w) ≥ 0; the blocking row leaves
    ratio = torch.where(support & (v < 0), w / (w - v), torch.full_like(v, float("inf")))
    theta = ratio.amin(-1, keepdim=True).clamp(0.0, 1.0)
    minor = ok & ~major
    w_minor = _drop_blocking(w + theta * (v - w), ratio)
    # ray step (Σu = 0, so some u_i < 0 blocks it)
    blocked = support & (ray < 0)
    unbounded = ~ok & ~done & ~stuck & torch.isfinite(ray).all(-1) & blocked.any(-1)
    safe_ray = torch.where(blocked, ray, -torch.ones_like(ray))  # no 0/0 off the blocking rows
    ratio_ray = torch.where(blocked, w / -safe_ray, torch.full_like(ray, float("inf")))
    w_ray = _drop_blocking(w + torch.where(unbounded.unsqueeze(-1), ratio_ray.amin(-1, keepdim=True), 0.0) * ray, ratio_ray)
    w_moved = torch.where(minor.unsqueeze(-1), w_minor, w_ray)
    moved = minor | unbounded
    w = torch.where(major.unsqueeze(-1), v_major, torch.where(moved.unsqueeze(-1), w_moved, w))
    entering = torch.zeros_like(support).scatter(-1, enter, True) & (major & ~finished).unsqueeze(-1)
    support = torch.where(moved.unsqueeze(-1), w_moved > 0, support | entering)
    stuck = stuck | ~(ok | done | unbounded) | (minor & (theta.squeeze(-1) <= 0))
    return w, support, done | finished, stuck


def _drop_blocking(w, ratio) -> torch.Tensor:
    """``w`` with the row of least ``ratio`` (the one that blocked the step) set to 0, on the simplex."""
    w = w.scatter(-1, ratio.argmin(-1, keepdim=True), 0.0).clamp_min(0)
    return w / w.sum(-1, keepdim=True)


def _stationary_on(g, b, r, m) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(w, 1ᵀv, u)``: the stationary point on each support of ``m`` before any feasibility
    check (see :func:`_support_candidates`), and u = (B/A)G⁻¹1 − G⁻¹b (Σu = 0). Along u the
    objective's asymptotic slope is u·b + r‖g_u‖ = ‖g_u‖(r − ‖g_u‖) (u·b = −‖g_u‖² = B²/A − C):
    negative exactly where B² − A(C − r²) < 0, where no stationary point exists."""
    g_hat, dn = equilibrate(g, 0.0)  # g is positive definite already (_dual_terms)
    a = restricted(g_hat.unsqueeze(-3), m)
    dn = dn.unsqueeze(-2)
    rhs = torch.stack([m / dn, m * b.unsqueeze(-2) / dn], dim=-1)  # [..., S, K, 2]: 1_S, b_S
    sol = torch.linalg.solve(a, rhs) / dn.unsqueeze(-1)
    g_inv_1, g_inv_b = sol[..., 0], sol[..., 1]
    big_a = (m * g_inv_1).sum(-1)
    big_b = (m * g_inv_b).sum(-1)
    big_c = (m * b.unsqueeze(-2) * g_inv_b).sum(-1)
    root = torch.sqrt((big_b.square() - big_a * (big_c - r.square())).clamp(min=0.0))
    nu = (big_b + root) / torch.where(big_a != 0, big_a, torch.ones_like(big_a))
    v = nu.unsqueeze(-1) * g_inv_1 - g_inv_b  # r·v, the positive factor cancels in w
    total = v.sum(-1, keepdim=True)
    # One Newton step on vᵀGv = r² (derivative 2·1ᵀv): the root above loses digits to the
    # cancellation in B² − A(C − r²); the quadratic form of v itself does not.
    quad_v = (v * (v.unsqueeze(-2) @ g.unsqueeze(-3)).squeeze(-2)).sum(-1, keepdim=True)
    safe = torch.where(total > 0, total, torch.ones_like(total))
    v = v - ((quad_v - r.unsqueeze(-1).square()) / (2 * safe) * (total > 0)) * g_inv_1
    total = v.sum(-1, keepdim=True)
    ray = (big_b / torch.where(big_a != 0, big_a, torch.ones_like(big_a))).unsqueeze(-1) * g_inv_1 - g_inv_b
    return v / torch.where(total > 0, total, torch.ones_like(total)), total, ray


def _support_candidates(g, b, r, m) -> tuple[torch.Tensor, torch.Tensor]:
    """Dual stationary points on the supports ``m`` ([S, K] or [..., S, K]): ``(w, feasible)``.

    On a support S, stationarity b_S + r G_SS w / s = ν1 with s = ‖g_w‖ gives w = s v,
    v = G_SS⁻¹(ν1 − b_S) / r; vᵀG_SS v = 1 is A ν² − 2 B ν + C − r² = 0 with A = 1ᵀG⁻¹1,
    B = 1ᵀG⁻¹b, C = bᵀG⁻¹b, whose larger root makes 1ᵀv = sqrt(B² − A(C − r²)) / r > 0.
    """
    w, total, _ = _stationary_on(g, b, r, m)
    feasible = (w >= -1e-12).all(-1) & (total.squeeze(-1) > 0) & torch.isfinite(w).all(-1)
    w = w.clamp_min(0.0)
    w = w / w.sum(-1, keepdim=True).clamp_min(1e-300)
    w = torch.where(feasible.unsqueeze(-1), w, torch.zeros_like(w))
    # A single row is its own stationary point: 1ᵀv can be 0 there (r = 0: c = 0 or g0 = 0)
    single = m.sum(-1, keepdim=True) == 1
    return torch.where(single, m.expand_as(w), w), feasible | single.squeeze(-1)


def _enumerated_optimum(g, b, r) -> torch.Tensor:
    """w* of the dual on ``(g, b, r)`` from :func:`_dual_terms`, by scoring every support."""
    k = g.shape[-1]
    w, feasible = _support_candidates(g, b, r, support_masks(k, g.device))
    obj = dual_objective(g.unsqueeze(-3), b.unsqueeze(-2), r.unsqueeze(-1), w)
    obj = torch.where(feasible, obj, torch.full_like(obj, float("inf")))
    best = obj.argmin(-1, keepdim=True)
    return torch.gather(w, -2, best.unsqueeze(-1).expand(*best.shape, k)).squeeze(-2)


def primal_weights(g, r, w, c: float, ridge: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Weights of d = g0 + (r/‖g_w‖) g_w, or of a better primal-feasible candidate.

    ``g`` is G + δ diag G (``ridge`` = δ, :func:`_dual_terms`). G is known to ±e‖g_i‖‖g_j‖ entry
    by entry, e = max(ε, δ/K) (ε of ``dtype``; δ/K where the spectral bound δ says more), so
    ‖g_w‖² to ±e(Σ_k |w_k|‖g_k‖)² and r² to ±c²e(Σ_k ‖g_k‖/K)²: the step takes the lower end
    of r over the upper end of ‖g_w‖, so d stays inside the ball even where g_w is rounding
    noise or g0 is small against the rows (d left it by 5e-4 of r in float32 there). The
    candidates are then compared on the primal objective min_i g_i·d (in float64 on G): the
    dual's d, the mean, and 0 when c ≥ 1. Each task's gain (Gv)_i is known to
    ±4e‖g_i‖ Σ_j ‖g_j‖|v_j|; the dual's d loses to the mean only where the mean beats even
    its most favourable reading, and to 0 (c ≥ 1) unless its least favourable reading is still
    positive: near a stationary point, where its gains are 0 ± noise, c ≥ 1 returns 0.
    """
    k = g.shape[-1]
    norms = torch.diagonal(g, dim1=-2, dim2=-1).div(1.0 + ridge.squeeze(-1)).sqrt()
    entry = (ridge.squeeze(-1) / k).clamp_min(torch.finfo(dtype).eps)
    unsure = entry * (norms * w.abs()).sum(-1, keepdim=True).square()
    gw_norm = (quad(g, w).clamp(min=0.0).unsqueeze(-1) + unsure).sqrt()
    # r² = c²·1ᵀG1/K² is known to ±c²e(Σ_k‖g_k‖/K)²: lost to cancellation when g0 is small
    r_low = (r.square() - c**2 * entry * norms.mean(-1, keepdim=True).square()).clamp(min=0.0).sqrt()
    dual = 1.0 / k + r_low / torch.where(gw_norm > 0, gw_norm, torch.ones_like(gw_norm)) * w  # 0: w on zero rows only
    mean = torch.full_like(dual, 1.0 / k)
    gains = lambda v: (g @ v.unsqueeze(-1)).squeeze(-1)  # noqa: E731
    noise = lambda v: 4 * entry * norms * (norms * v.abs()).sum(-1, keepdim=True)  # noqa: E731
    best_reading = (gains(dual) + noise(dual)).amin(-1, keepdim=True)
    out = torch.where(gains(mean).amin(-1, keepdim=True) > best_reading, mean, dual)
    if c >= 1.0:  # 0 is in the ball and scores 0: keep d only where it certifiably beats that
        out = torch.where((gains(out) - noise(out)).amin(-1, keepdim=True) > 0, out, torch.zeros_like(out))
    return out


class CAGrad(WarmStartSolver, GramianAggregator):
    """Conflict-averse gradient.

    Options: ``c`` (0.5; 0 gives the mean; MT10 uses 0.9), ``rescale`` ∈ {0, 1, 2} (1 as in the
    reference code: divide by 1 + c²; TorchJD uses 0). K ≤ 10: the dual is solved exactly by
    support enumeration. K > 10: ``max_iter`` (100) active-set rounds / ``tol`` (1e-10, the
    Frank–Wolfe gap relative to the dual's scale), ``warm_start`` (False): start each solve from the previous dual solution (same K),
    which is then state (``w_prev``). Weights are
    invariant to a global gradient scale. A solve that stops at ``max_iter`` without reaching
    ``tol`` increments ``not_converged`` (a device counter).
    """

    def __init__(
        self, c: float = 0.5, rescale: int = 1, max_iter: int = 100, tol: float = 1e-10, warm_start: bool = False,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        check_number("CAGrad", "c", c)
        check_choice("CAGrad", "rescale", rescale, RESCALES)
        self.c = float(c)
        self.rescale = rescale
        self._init_solver("CAGrad", max_iter, tol, warm_start)

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        w, w_dual, converged = cagrad_dual_solve(gram, self.c, self.max_iter, self.tol, init=self._start(gram.shape[-1]))
        self._count_not_converged(converged)
        self._remember(w_dual)
        divisor = (1.0, 1.0 + self.c**2, 1.0 + self.c)[self.rescale]
        return (w / divisor).to(gram.dtype)

    def __repr__(self) -> str:
        return f"CAGrad(c={self.c:g}, rescale={self.rescale})"
