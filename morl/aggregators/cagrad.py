"""CAGrad (Liu et al. 2021, arXiv 2110.14048): conflict-averse gradient descent.

Primal (eq. 2 / Alg. 1): maximise min_i g_i·d over the ball ‖d − g0‖ ≤ c‖g0‖ around the
mean gradient g0. Dual over the simplex (what the reference code solves):

    w* = argmin_{w∈Δ_K} g_w·g0 + c‖g0‖ ‖g_w‖,   g_w = Σ_k w_k g_k,
    d  = g0 + (c‖g0‖ / ‖g_w*‖) g_w*,

then divided by 1 (rescale=0), 1 + c² (rescale=1, the reference default) or 1 + c (rescale=2).
Only inner products enter, so the dual is solved on the K×K Gramian, in torch, with no scipy
and no host sync: exactly by support enumeration for K ≤ ``ENUMERATE_MAX_K`` (one batched
solve, :func:`cagrad_dual_exact`). Above that (:func:`cagrad_dual_weights`) the stationary
point on all K rows, re-solved after dropping negative weights, is kept when its Frank–Wolfe
gap is within ``tol`` (two small solves). Up to ``EXACT_MAX_K`` = 10 rows, on the CPU,
active-set steps continue from there, and whatever they leave (the dual can be unbounded on a
support's affine hull) is solved by enumeration: exact, and on MT10's actor gradients 2–3 ms
instead of the 17–21 ms FISTA took. Above 10 rows accelerated projected gradient with a
masked line search runs, followed by the exact solve on the support it found.

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
from morl.solvers.gramian import gram_scale
from morl.solvers.min_norm import ENUMERATE_MAX_K, EXACT_MAX_K, RIDGE, equilibrate, restricted, ridge_for, support_masks
from morl.solvers.simplex_descent import fw_gap, minimize_on_simplex

RESCALES = (0, 1, 2)
#: smoothing of ‖g_w‖ = sqrt(wᵀGw + EPS), on G / max diag
EPS = 1e-12


def _dual_terms(gram: torch.Tensor, c: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(G in float64, b = G1/K = [g_k·g0], r = c‖g0‖ [..., 1])``, G divided by its largest
    diagonal entry: below gram_scale's threshold (~1e-19) its input is not normalised, and
    absolute tolerances would then decide the solve (the dual is homogeneous in G)."""
    g = gram.to(torch.float64)
    top = torch.diagonal(g, dim1=-2, dim2=-1).amax(-1, keepdim=True).unsqueeze(-1)
    g = g / torch.where(top > 0, top, torch.ones_like(top))
    b = g.mean(-1)
    return g, b, c * torch.sqrt(b.mean(-1, keepdim=True).clamp(min=0.0))


def dual_objective(g, b, r, w) -> torch.Tensor:
    """g_w·g0 + r‖g_w‖ (smoothed by EPS) for weights ``w`` [..., K] (extra dims broadcast)."""
    gw = (w.unsqueeze(-2) @ g).squeeze(-2)
    return (w * b).sum(-1) + r * torch.sqrt((w * gw).sum(-1).clamp(min=0.0) + EPS)


def cagrad_dual_weights(
    gram: torch.Tensor, c: float, max_iter: int = 100, tol: float = 1e-10, init: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weights, w*)`` for a normalised ``gram``: d = weights·g before the rescale, w* the dual
    solution on the simplex (pass it back as ``init`` to warm-start the next solve)."""
    return cagrad_dual_solve(gram, c, max_iter, tol, init)[:2]


def cagrad_dual_solve(
    gram: torch.Tensor, c: float, max_iter: int = 100, tol: float = 1e-10, init: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`cagrad_dual_weights` plus ``converged`` [...]: False when ``max_iter`` ran out
    before the gap reached ``tol`` and the exact solve on the support found did not close it."""
    g, b, r = _dual_terms(gram, c)

    def fun(w):
        gw = (g @ w.unsqueeze(-1)).squeeze(-1)
        norm = torch.sqrt((w * gw).sum(-1, keepdim=True).clamp(min=0.0) + EPS)
        return (w * b).sum(-1) + (r * norm).squeeze(-1), b + r * gw / norm

    scale = b.abs().amax(-1) + r.squeeze(-1) + EPS  # the gap's units
    if init is None:  # the active-set start is often already optimal: then no FISTA at all
        w_as = _dropped_negatives_start(g, b, r, RIDGE)  # float64-tight: the gap check decides
        exact_fallback = b.shape[-1] <= EXACT_MAX_K
        if exact_fallback and reads_are_free(g):  # on CPU, active-set steps (they read flags)
            w_as, done_as = _active_set_steps(g, b, r, w_as, RIDGE, tol * scale, rounds=b.shape[-1] + 10)
        else:  # (not above EXACT_MAX_K: FISTA's inexact answer would depend on the row order)
            done_as = fw_gap(w_as, _exact_gradient(g, b, r, w_as)) <= tol * scale
        if reads_are_free(g) and bool(done_as.all()):  # reading a flag is free on CPU
            return primal_weights(g, r, w_as, c, gram.dtype), w_as, done_as
        if exact_fallback:  # what the steps left, exactly; cheaper than FISTA here
            w_ex = _enumerated_optimum(g, b, r, ridge_for(gram.dtype))
            w_as = torch.where(done_as.unsqueeze(-1), w_as, w_ex)
            return primal_weights(g, r, w_as, c, gram.dtype), w_as, torch.ones_like(done_as)
    # Not from w_as: where FISTA stops at max_iter, a start that depends on the support found
    # would make the answer jump with rounding (d(aJ) ≠ a·d(J) on ill-conditioned Gramians).
    w0 = torch.full_like(b, 1.0 / b.shape[-1]) if init is None else init.to(g)
    step0 = 1.0 / (torch.diagonal(g, dim1=-2, dim2=-1).sum(-1) * (1.0 + c) + EPS)
    w, converged = minimize_on_simplex(fun, w0, step0, max_iter=max_iter, tol=tol, return_converged=True)
    if init is None:
        w, converged = torch.where(done_as.unsqueeze(-1), w_as, w), converged | done_as
    # The exact solve on the support FISTA found; kept only where it is feasible and better.
    support = (w > 1e-6 * w.amax(-1, keepdim=True)).to(g.dtype)
    w_s, feasible = _support_candidates(g, b, r, support.unsqueeze(-2), ridge_for(gram.dtype))
    w_s = w_s.squeeze(-2)
    better = feasible.squeeze(-1) & (dual_objective(g, b, r.squeeze(-1), w_s) <= dual_objective(g, b, r.squeeze(-1), w))
    w = torch.where(better.unsqueeze(-1), w_s, w)
    gap = fw_gap(w, fun(w)[1])
    converged = converged | (gap <= tol * scale)
    return primal_weights(g, r, w, c, gram.dtype), w, converged


def _exact_gradient(g, b, r, w) -> torch.Tensor:
    """∇ of g_w·g0 + r‖g_w‖ without the EPS smoothing (which moves the gradient by ~EPS/‖g_w‖²,
    5e-11 at ‖g_w‖² = 0.01: enough to fail a 1e-10 gap at an exact stationary point); where
    ‖g_w‖ = 0 it is not differentiable and the gradient is made +inf (the gap check fails)."""
    gw = (g @ w.unsqueeze(-1)).squeeze(-1)
    sq = (w * gw).sum(-1, keepdim=True)
    norm = torch.where(sq > 0, sq, torch.ones_like(sq)).sqrt()
    return torch.where(sq > 0, b + r * gw / norm, torch.full_like(gw, float("inf")))


def _dropped_negatives_start(g, b, r, ridge) -> torch.Tensor:
    """The dual's stationary point on all K rows, then on the rows left after dropping every
    negative weight, until none is negative (≤ K rounds, usually 1-2): a feasible point that
    is optimal whenever its Frank–Wolfe gap is ~0 (checked by the caller)."""
    support = torch.ones(b.shape, dtype=g.dtype, device=g.device)
    for _ in range(b.shape[-1]):
        w_raw, _ = _stationary_on(g, b, r, support.unsqueeze(-2), ridge)
        negative = (support > 0) & (w_raw.squeeze(-2) < 0)
        support = torch.where(negative, torch.zeros_like(support), support)
        if not reads_are_free(g) or not bool(negative.any()):
            break
    w, feasible = _support_candidates(g, b, r, support.unsqueeze(-2), ridge)
    uniform = torch.full_like(b, 1.0 / b.shape[-1])
    return torch.where(feasible, w.squeeze(-2), uniform)


def _active_set_steps(g, b, r, w, ridge, tol, rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Active-set steps on the dual from the feasible ``w`` (CPU: reads flags): ``(w, done)``,
    done where the Frank–Wolfe gap is ≤ ``tol`` (the units of ``b``).

    As Wolfe's steps for the min-norm point (:func:`morl.solvers.min_norm.wolfe_steps`), one
    :func:`_active_set_round` at a time. Unlike the min-norm problem, the dual can be unbounded
    below on a support's affine hull (|g0·g_u| > r‖g_u‖ along some u with Σu = 0, possible for
    c < 1); its "stationary point" then makes the row that just entered negative (a minor step
    of length 0), or does not exist (1ᵀv ≤ 0). Such an entry stops undone, for the caller's
    fallback; so does one whose optimum has g_w = 0 (no gradient there to certify it).
    """
    support = w > 0
    done = torch.zeros(w.shape[:-1], dtype=torch.bool, device=w.device)
    stuck = torch.zeros_like(done)
    for _ in range(rounds):
        w, support, done, stuck = _active_set_round(g, b, r, w, support, done, stuck, ridge, tol)
        if bool((done | stuck).all()):
            break
    return w, done


def _active_set_round(g, b, r, w, support, done, stuck, ridge, tol):
    """One step: ``(w, support, done, stuck)``. The objective is convex, so its stationary point
    v on the affine hull of the support S is no worse than w. A major step (v ≥ 0 on S) moves
    there and, unless its gap is ≤ ``tol``, adds the row of least gradient (the one that lowers
    the objective most); a minor step moves towards v until a weight hits 0 and drops that row.
    Entries done or stuck stay as they are."""
    v, total = _stationary_on(g, b, r, support.to(g.dtype).unsqueeze(-2), ridge)
    v, total = v[..., 0, :], total[..., 0, 0]
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
    w_minor = (w + theta * (v - w)).scatter(-1, ratio.argmin(-1, keepdim=True), 0.0).clamp_min(0)
    w_minor = w_minor / w_minor.sum(-1, keepdim=True)
    w = torch.where(major.unsqueeze(-1), v_major, torch.where(minor.unsqueeze(-1), w_minor, w))
    entering = torch.zeros_like(support).scatter(-1, enter, True) & (major & ~finished).unsqueeze(-1)
    support = torch.where(minor.unsqueeze(-1), w_minor > 0, support | entering)
    stuck = stuck | ~(ok | done) | (minor & (theta.squeeze(-1) <= 0))
    return w, support, done | finished, stuck


def _stationary_on(g, b, r, m, ridge) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w, 1ᵀv)``: the stationary point on each support of ``m`` before any feasibility
    check (see :func:`_support_candidates`)."""
    g_hat, dn = equilibrate(g, ridge)
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
    # cancellation in B² − A(C − r²); the quadratic form of v itself does not (1e-10 → 1e-15
    # stationarity error measured at K = 10).
    quad_v = (v * (v.unsqueeze(-2) @ g.unsqueeze(-3)).squeeze(-2)).sum(-1, keepdim=True)
    safe = torch.where(total > 0, total, torch.ones_like(total))
    v = v - ((quad_v - r.unsqueeze(-1).square()) / (2 * safe) * (total > 0)) * g_inv_1
    total = v.sum(-1, keepdim=True)
    return v / torch.where(total > 0, total, torch.ones_like(total)), total


def _support_candidates(g, b, r, m, ridge) -> tuple[torch.Tensor, torch.Tensor]:
    """Dual stationary points on the supports ``m`` ([S, K] or [..., S, K]): ``(w, feasible)``.

    On a support S, stationarity b_S + r G_SS w / s = ν1 with s = ‖g_w‖ gives w = s v,
    v = G_SS⁻¹(ν1 − b_S) / r; vᵀG_SS v = 1 is A ν² − 2 B ν + C − r² = 0 with A = 1ᵀG⁻¹1,
    B = 1ᵀG⁻¹b, C = bᵀG⁻¹b, whose larger root makes 1ᵀv = sqrt(B² − A(C − r²)) / r > 0.
    """
    w, total = _stationary_on(g, b, r, m, ridge)
    feasible = (w >= -1e-12).all(-1) & (total.squeeze(-1) > 0) & torch.isfinite(w).all(-1)
    w = w.clamp_min(0.0)
    w = w / w.sum(-1, keepdim=True).clamp_min(1e-300)
    return torch.where(feasible.unsqueeze(-1), w, torch.zeros_like(w)), feasible


def cagrad_dual_exact(gram: torch.Tensor, c: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The dual of :func:`cagrad_dual_weights` solved exactly by enumerating supports (small K).

    Every support's stationary point (:func:`_support_candidates`) is scored; the objective is
    convex, so the optimum is the feasible (w ≥ 0) candidate of least objective; every
    singleton support is feasible, so one always exists. Returns ``(weights, w*)``.
    """
    g, b, r = _dual_terms(gram, c)
    w_star = _enumerated_optimum(g, b, r, ridge_for(gram.dtype))
    return primal_weights(g, r, w_star, c, gram.dtype), w_star


def _enumerated_optimum(g, b, r, ridge) -> torch.Tensor:
    """w* of the dual on ``(g, b, r)`` from :func:`_dual_terms`, by scoring every support."""
    k = g.shape[-1]
    w, feasible = _support_candidates(g, b, r, support_masks(k, g.device), ridge)
    obj = dual_objective(g.unsqueeze(-3), b.unsqueeze(-2), r, w)
    obj = torch.where(feasible, obj, torch.full_like(obj, float("inf")))
    best = obj.argmin(-1, keepdim=True)
    return torch.gather(w, -2, best.unsqueeze(-1).expand(*best.shape, k)).squeeze(-2)


def primal_weights(g, r, w, c: float, dtype: torch.dtype) -> torch.Tensor:
    """Weights of d = g0 + (r/‖g_w‖) g_w, or of a better primal-feasible candidate.

    ‖g_w‖ is floored at sqrt(ε) of ``dtype`` (relative to the largest row): below that its
    direction is rounding noise and r/‖g_w‖ would blow the weights up (to inf in float32);
    the floor keeps d inside the ball. The candidates are then compared on the primal
    objective min_i g_i·d (in float64 on G): the dual's d, the mean, and 0 when c ≥ 1.
    A candidate must win by more than the rounding of its score (``slack``), so near a
    stationary point, where the dual's score is 0 ± noise, c ≥ 1 returns 0.
    """
    k = g.shape[-1]
    floor = torch.finfo(dtype).eps ** 0.5 * gram_scale(g).squeeze(-1).sqrt()
    gw_norm = torch.sqrt((w * (g @ w.unsqueeze(-1)).squeeze(-1)).sum(-1, keepdim=True).clamp(min=0.0))
    dual = 1.0 / k + r / torch.maximum(gw_norm, floor) * w
    mean = torch.full_like(dual, 1.0 / k)
    worst = lambda v: (g @ v.unsqueeze(-1)).squeeze(-1).amin(-1, keepdim=True)  # noqa: E731
    # rounding of min_i (Gv)_i: a few ε of the Gramian's dtype times ‖v‖₁ (G/max diag ≤ 1)
    slack = 8 * k * torch.finfo(dtype).eps * gram_scale(g).squeeze(-1) * dual.abs().sum(-1, keepdim=True)
    out = torch.where(worst(mean) > worst(dual) + slack, mean, dual)
    if c >= 1.0:  # 0 is in the ball and scores 0: keep d only where it certifiably beats that
        out = torch.where(worst(out) > slack, out, torch.zeros_like(out))
    return out


class CAGrad(WarmStartSolver, GramianAggregator):
    """Conflict-averse gradient.

    Options: ``c`` (0.5; 0 gives the mean; MT10 uses 0.9), ``rescale`` ∈ {0, 1, 2} (1 as in the
    reference code: divide by 1 + c²; TorchJD uses 0). K ≤ 10: the dual is solved exactly
    (support enumeration, or active-set steps checked by their Frank–Wolfe gap). K > 10:
    ``max_iter`` (100) / ``tol`` (1e-10) of the iterative dual solver, ``warm_start`` (False):
    start each solve from the previous dual solution (same K), which cuts iterations when
    gradients change slowly between steps (it also makes K ≤ 6 iterate, as MGDA does); the
    previous solution is then state (``w_prev``). Weights are
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
        # the weights are homogeneous of degree 0 in G: normalise before solving
        gram = gram / gram_scale(gram)
        init = self._start(gram.shape[-1])
        if gram.shape[-1] <= ENUMERATE_MAX_K and init is None:  # as MGDA: enumerate unless warm-started
            w, w_dual = cagrad_dual_exact(gram, self.c)
        else:
            w, w_dual, converged = cagrad_dual_solve(gram, self.c, self.max_iter, self.tol, init=init)
            self._count_not_converged(converged)
        self._remember(w_dual)
        divisor = (1.0, 1.0 + self.c**2, 1.0 + self.c)[self.rescale]
        return (w / divisor).to(gram.dtype)

    def __repr__(self) -> str:
        return f"CAGrad(c={self.c:g}, rescale={self.rescale})"
