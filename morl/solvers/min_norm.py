"""Min-norm point of the convex hull of K gradients, from their K×K Gramian.

    λ* = argmin_{λ∈Δ_K} ½ λᵀ G λ (+ ρ/2 ‖λ‖²),    d = Σ_k λ*_k g_k.

K = 2 has a closed form (with the reference code's tie branches); 2 < K ≤ ``ENUMERATE_MAX_K``
enumerates supports; larger K starts from the affine minimiser on all K rows, drops the rows
with negative weights (a few batched solves find a feasible support), then Wolfe's
active-set steps (Wolfe 1976, "Finding the nearest point in a polytope") make it exact. A
warm start (``init``) instead runs accelerated projected gradient on the simplex
(:mod:`morl.solvers.simplex_descent`) from ``init`` to find the support before Wolfe's steps. All functions take
``gram`` of shape ``[..., K, K]`` and return ``λ`` of shape ``[..., K]``.

Scale. Everything is solved in float64 on G divided by its largest diagonal entry, and the
linear systems on G's *equilibrated* form D⁻¹GD⁻¹ (D = diag(‖g_k‖), unit diagonal), so
rows whose norms differ by 1e6 are solved as accurately as equal ones. The ridge that keeps
singular supports solvable is relative too: ρ_r ‖g_k‖² on the diagonal, with ρ_r a few
rounding units of ``gram``'s dtype (:func:`ridge_for`). A Gramian formed in float32 is only
known to ~1e-7 relative, so it is singular "up to rounding" when the rows are (rank-deficient
or Pareto-stationary Jacobians); the ridge makes such a Gramian positive definite, and the
direction then conflicts with g_k by at most ρ_r‖g_k‖²λ_k (its KKT conditions).
"""

from __future__ import annotations

import torch

from morl.host_reads import reads_are_free
from morl.solvers.gramian import gram_scale
from morl.solvers.simplex_descent import fw_gap, minimize_on_simplex

#: The reference code's denominator guard, here relative to the (normalised) Gramian.
EPS_2 = 1e-8
#: Up to this K the min-norm problem is solved exactly by enumerating supports (2^K − 1
#: small linear systems in one batched solve): ~1 ms instead of tens of FISTA iterations
#: of small kernels each. Above it the batch grows as 2^K and the iterative solver wins.
EXACT_MAX_K = 10
#: Up to this K the min-norm problem enumerates its 2^K − 1 supports. Above it the active-set
#: start + Wolfe is exact too and cheaper: at K = 10 ~0.4 ms against ~2.5 ms for 1023 systems.
ENUMERATE_MAX_K = 6
#: Smallest relative ridge (float64 Gramians), in units of each row's squared norm.
RIDGE = 1e-12
#: Relative ridge in rounding units of the Gramian's dtype (float32: 16 ε ≈ 1.9e-6).
RIDGE_ULPS = 16
#: A candidate weight below −FEASIBLE is infeasible (λ is scale-free, in [0, 1]).
FEASIBLE = 1e-10
#: Candidates within TIE (relative) of the best objective are tied; the first one wins.
TIE = 1e-9
#: Squared row norms below this (on G / max diag) count as zero rows.
ZERO_ROW = 1e-300


def ridge_for(dtype: torch.dtype) -> float:
    """The relative ridge for a Gramian held in ``dtype`` (how precisely it is known)."""
    return max(RIDGE, RIDGE_ULPS * torch.finfo(dtype).eps)


def equilibrate(gram: torch.Tensor, ridge: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(D⁻¹GD⁻¹ + ridge·I, d)`` with d_k = ‖g_k‖ (1 for zero rows): a unit-diagonal system."""
    diag = torch.diagonal(gram, dim1=-2, dim2=-1)
    d = torch.where(diag > ZERO_ROW, diag, torch.ones_like(diag)).sqrt()
    eye = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
    return gram / (d.unsqueeze(-1) * d.unsqueeze(-2)) + ridge * eye, d


def regularised(gram: torch.Tensor, ridge: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(G_r, Ĝ_r, d)``: G_r = D Ĝ_r D = G + ridge·D², the problem actually solved."""
    g_hat, d = equilibrate(gram, ridge)
    return g_hat * (d.unsqueeze(-1) * d.unsqueeze(-2)), g_hat, d


def support_masks(k: int, device: torch.device) -> torch.Tensor:
    """All 2^k − 1 non-empty supports as a float64 mask matrix ``[S, k]``."""
    idx = torch.arange(1, 2**k, device=device)
    return ((idx.unsqueeze(-1) >> torch.arange(k, device=device)) & 1).to(torch.float64)


def restricted(g_hat: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``g_hat`` restricted to the mask(s) ``m`` ([..., K]) with the identity outside, so that
    solving it against ``b ⊙ m`` applies ``G_SS⁻¹`` on S and gives zeros elsewhere."""
    return m.unsqueeze(-1) * g_hat * m.unsqueeze(-2) + torch.diag_embed(1 - m)


def support_systems(gram: torch.Tensor, ridge: float = RIDGE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(masks [S, K], A [..., S, K, K], d [..., K])`` for every non-empty support S: ``A`` is
    the equilibrated, ridged Gramian restricted to S (:func:`restricted`). ``G_SS⁻¹ b`` on S is
    ``solve(A, m ⊙ b / d) / d``. The exact small-K solvers (min-norm here, CAGrad's dual)
    enumerate supports with it."""
    m = support_masks(gram.shape[-1], gram.device)
    g_hat, d = equilibrate(gram, ridge)
    return m, restricted(g_hat.unsqueeze(-3), m), d


def _normalise_weights(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x / Σx, Σx ≠ 0 and finite)``; the sign of Σx is irrelevant once divided out."""
    total = x.sum(-1, keepdim=True)
    ok = (total != 0) & torch.isfinite(total)
    return x / torch.where(ok, total, torch.ones_like(total)), ok.squeeze(-1)


def quad(gram: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """λᵀGλ over the last dim, batched (``gram`` broadcasts over ``lam``'s extra dims)."""
    return ((lam.unsqueeze(-2) @ gram).squeeze(-2) * lam).sum(-1)


def min_norm_exact(gram: torch.Tensor, ridge: float | None = None) -> torch.Tensor:
    """Exact min-norm weights by support enumeration (use for small K; no iteration, no sync).

    For every support S the equality-constrained problem min ½λᵀG_rλ, 1ᵀλ = 1, λ_i = 0 (i ∉ S)
    gives λ_S ∝ G_SS⁻¹1. The optimum's own support yields the optimum, every other feasible
    candidate is a feasible point, so the feasible candidate of least objective is optimal.
    """
    k = gram.shape[-1]
    g = gram.to(torch.float64)
    g = g / gram_scale(g)
    ridge = ridge_for(gram.dtype) if ridge is None else ridge
    m, a, d = support_systems(g, ridge)  # [S, K], [..., S, K, K], [..., K]
    d = d.unsqueeze(-2)
    x = torch.linalg.solve(a, m / d) / d  # [..., S, K]: G_SS⁻¹1 on each support
    lam, ok = _normalise_weights(x)
    feasible = ok & (lam >= -FEASIBLE).all(-1)
    obj = quad(regularised(g, ridge)[0].unsqueeze(-3), lam)  # [..., S]
    obj = torch.where(feasible, obj, torch.full_like(obj, float("inf")))
    # Degenerate (rank-deficient) Gramians have many optimal supports: take the first one
    # within rounding of the optimum so the weights do not flip with the gradients' scale.
    best_obj = obj.amin(-1, keepdim=True)
    tied = obj <= best_obj + TIE * best_obj.abs()
    best = tied.to(torch.int8).argmax(-1, keepdim=True)  # first tied support, [..., 1]
    out = torch.gather(lam, -2, best.unsqueeze(-1).expand(*best.shape, k)).squeeze(-2).clamp_min(0)
    return out / out.sum(-1, keepdim=True)


def min_norm_2(gram: torch.Tensor, eps: float = EPS_2) -> torch.Tensor:
    """Closed-form K = 2 min-norm weights ``[..., 2]`` (the reference code's form).

    With g11 = ‖g1‖², g12 = g1·g2, g22 = ‖g2‖²:
    if g12 < min(g11, g22): λ = (g22 − g12)/(g11 + g22 − 2 g12 + eps);
    elif g11 < g22: λ = 1 (g1 is the shorter one and already the min-norm point);
    else: λ = 0. Weights are (λ, 1 − λ).
    """
    g = gram / gram_scale(gram)
    g11, g12, g22 = g[..., 0, 0], g[..., 0, 1], g[..., 1, 1]
    denom = g11 + g22 - 2 * g12 + eps  # = ‖g1 − g2‖² + eps > 0 whenever the branch is taken
    inner = (g22 - g12) / torch.where(denom > 0, denom, torch.ones_like(denom))
    lam = torch.where(g12 < torch.minimum(g11, g22), inner, torch.where(g11 < g22, torch.ones_like(g11), torch.zeros_like(g11)))
    lam = lam.clamp(0.0, 1.0)
    return torch.stack([lam, 1 - lam], dim=-1)


def min_norm_2_unguarded(gram: torch.Tensor) -> torch.Tensor:
    """:func:`min_norm_2` with ``eps`` = 0 in fewer ops (the K = 2 case dominates small calls).

    λ = clamp((g22 − g12)/‖g1 − g2‖², 0, 1) is the reference's three branches at once: g12 ≥ g11
    (g1 is the min-norm point, g11 < g22) makes the ratio ≥ 1, g12 ≥ g22 makes it ≤ 0, and
    ‖g1 − g2‖ = 0 (equal rows) takes the reference's λ = 0. No scale enters: λ is a ratio.
    """
    g11, g22, g12 = gram[..., 0, 0], gram[..., 1, 1], gram[..., 0, 1]
    denom = g11 + g22 - 2 * g12
    positive = denom > 0
    lam = ((g22 - g12) / torch.where(positive, denom, torch.ones_like(denom))).clamp(0.0, 1.0) * positive
    return torch.stack([lam, 1 - lam], dim=-1)


def min_norm_2_host(gram: list[list[float]]) -> list[float]:
    """:func:`min_norm_2_unguarded` for one finite Gramian held as Python floats (the same
    operations in the same float64 arithmetic, without ~15 tensor ops of dispatch)."""
    (g11, g12), (_, g22) = gram
    denom = g11 + g22 - 2 * g12
    lam = min(max((g22 - g12) / denom, 0.0), 1.0) if denom > 0 else 0.0
    return [lam, 1 - lam]


def kkt_violation(gram_r: torch.Tensor, lam: torch.Tensor, tol: float) -> torch.Tensor:
    """[..., K]: how far each row is from the min-norm KKT condition (G_r λ)_k ≥ λᵀG_rλ, beyond
    ``tol`` relative to the problem's own scale ‖g_k‖‖d‖ (and float64 rounding). > 0 means
    adding row k to the support would shorten d."""
    grad = (gram_r @ lam.unsqueeze(-1)).squeeze(-1)
    f = (lam * grad).sum(-1, keepdim=True).clamp_min(0)
    diag = torch.diagonal(gram_r, dim1=-2, dim2=-1)
    floor = 8 * lam.shape[-1] * torch.finfo(torch.float64).eps * (diag.sqrt() + f.sqrt())
    return (f - grad) - tol * (diag * f).sqrt() - floor


def wolfe_steps(gram_r, g_hat, d, lam, tol: float, rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Wolfe's min-norm-point iterations from the feasible ``lam``; ``(λ, converged [...])``.

    A major step (the affine minimiser on the support S is ≥ 0) moves there and adds the row
    that violates the KKT condition most; a minor step moves towards it until a weight hits 0
    and drops that row. Batched with masks, so no host sync; on CPU it stops once every entry
    has converged. An entry still moving after ``rounds`` steps is reported as not converged.
    """
    support = lam > 0
    done = torch.zeros(lam.shape[:-1], dtype=torch.bool, device=lam.device)
    for _ in range(rounds):
        m = support.to(lam.dtype)
        y, ok = _normalise_weights(m * torch.linalg.solve(restricted(g_hat, m), m / d) / d)
        major = ok & ((y >= 0) | ~support).all(-1) & ~done
        viol = torch.where(support, torch.full_like(y, -1.0), kkt_violation(gram_r, y.clamp_min(0), tol))
        enter = viol.argmax(-1, keepdim=True)
        adds = major & (viol.gather(-1, enter).squeeze(-1) > 0)
        # minor step: the largest θ ∈ [0, 1] keeping λ + θ(y − λ) ≥ 0; the blocking row leaves
        ratio = torch.where(support & (y < 0), lam / (lam - y), torch.full_like(y, float("inf")))
        theta = ratio.amin(-1, keepdim=True).clamp(0.0, 1.0)
        leave = ratio.argmin(-1, keepdim=True)
        minor = ok & ~major & ~done
        lam_minor = (lam + theta * (y - lam)).scatter(-1, leave, 0.0).clamp_min(0)
        lam_minor = lam_minor / lam_minor.sum(-1, keepdim=True)
        lam = torch.where(major.unsqueeze(-1), y.clamp_min(0), torch.where(minor.unsqueeze(-1), lam_minor, lam))
        entering = torch.zeros_like(support).scatter(-1, enter, True) & adds.unsqueeze(-1)
        support = torch.where(minor.unsqueeze(-1), lam_minor > 0, support | entering)
        done = done | (major & ~adds)
        if reads_are_free(lam) and bool(done.all()):
            break
    return lam, done


def min_norm_solve(
    gram: torch.Tensor, rho: float = 0.0, max_iter: int = 500, tol: float = 1e-8, init: torch.Tensor | None = None,
    eps_2: float = EPS_2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(λ, converged)``: :func:`min_norm` plus a [...] bool saying whether the solve reached
    ``tol`` (always True for the closed form and the enumeration). No host sync. ``eps_2`` is
    the K = 2 closed form's denominator guard (the reference code's 1e-8; MGDA passes 0, as
    the guard leaves ‖d‖ ≈ 1e-8‖g‖ at Pareto-stationary points)."""
    k = gram.shape[-1]
    work = gram.to(torch.float64)
    if rho:
        work = work + rho * torch.eye(k, dtype=work.dtype, device=work.device)
    done = torch.ones(gram.shape[:-2], dtype=torch.bool, device=gram.device)
    if k == 1:
        return torch.ones(gram.shape[:-1], dtype=gram.dtype, device=gram.device), done
    if k == 2:
        lam = min_norm_2(work, eps=eps_2) if eps_2 else min_norm_2_unguarded(work)
        return lam.to(gram.dtype), done
    if k <= ENUMERATE_MAX_K and init is None:
        return min_norm_exact(work, ridge_for(gram.dtype)).to(gram.dtype), done
    lam, done = min_norm_iterative(work, ridge_for(gram.dtype), max_iter, tol, init)
    return lam.to(gram.dtype), done


def min_norm_iterative(work, ridge, max_iter, tol, init) -> tuple[torch.Tensor, torch.Tensor]:
    """Wolfe's steps from a feasible start: the active-set start (cold) or FISTA from ``init``."""
    work = work / gram_scale(work)
    g_hat, d = equilibrate(work, ridge)
    if init is None:
        return _cold_solve(g_hat, d, tol)
    gram_r = g_hat * (d.unsqueeze(-1) * d.unsqueeze(-2))  # G + ridge·D², the problem solved
    return _wolfe(gram_r, g_hat, d, _fista_start(gram_r, init, max_iter, tol), tol)


def _cold_solve(g_hat, d, tol) -> tuple[torch.Tensor, torch.Tensor]:
    """Wolfe's steps from the active-set start (:func:`dropped_negatives_start`)."""
    lam = dropped_negatives_start(g_hat, d)
    # The start is the affine minimiser on its support: optimal when that is every row (the
    # affine minimiser lies in the simplex), else unless a row outside it violates the KKT
    # condition. On CPU (a free flag read) these checks replace Wolfe's confirming round.
    if reads_are_free(lam) and bool((lam > 0).all()):
        return lam, torch.ones(lam.shape[:-1], dtype=torch.bool)
    gram_r = g_hat * (d.unsqueeze(-1) * d.unsqueeze(-2))  # G + ridge·D², the problem solved
    if reads_are_free(lam):
        optimal = (kkt_violation(gram_r, lam, tol) <= 0).all(-1)
        if bool(optimal.all()):
            return lam, optimal
    return _wolfe(gram_r, g_hat, d, lam, tol)


def _wolfe(gram_r, g_hat, d, lam, tol) -> tuple[torch.Tensor, torch.Tensor]:
    """Wolfe's steps from the feasible ``lam``: up to 4K + 10 rounds on CPU, where they stop as
    soon as every problem has converged, K + 10 elsewhere (no early exit there: every round
    costs). Wolfe's count is not bounded by K: rank-deficient, Pareto-stationary float32
    Gramians at K = 24 took 50-100 rounds from the active-set start, and FISTA starts on
    Gramians whose row norms spread over 1e6 more than K + 10 (tests/test_min_norm_warm.py)."""
    k = lam.shape[-1]
    return wolfe_steps(gram_r, g_hat, d, lam, tol, rounds=4 * k + 10 if reads_are_free(lam) else k + 10)


def dropped_negatives_start(g_hat, d) -> torch.Tensor:
    """A feasible λ with λ_S ∝ G_SS⁻¹1 ≥ 0: start from all K rows, drop every row whose weight
    is negative, re-solve. Each round drops ≥ 1 row and Σλ_S = 1 keeps one, so ≤ K rounds;
    when gradients conflict mildly (the common case) the first solve is already the optimum."""
    support = torch.ones(g_hat.shape[:-1], dtype=torch.bool, device=g_hat.device)
    cpu = reads_are_free(g_hat)  # reading a flag is free there
    for i in range(g_hat.shape[-1]):
        if i == 0:  # every row: no masking needed
            y, ok = _normalise_weights(torch.linalg.solve(g_hat, 1.0 / d) / d)
        else:
            m = support.to(g_hat.dtype)
            y, ok = _normalise_weights(m * torch.linalg.solve(restricted(g_hat, m), m / d) / d)
        negative = support & (y < 0) & ok.unsqueeze(-1)
        if not cpu:
            support = support & ~negative
            break
        if not bool(negative.any()):
            if i == 0 and bool(ok.all()):  # all K rows kept: y ≥ 0 already sums to 1
                return y
            break
        support = support & ~negative
    y = torch.where(support, y, torch.zeros_like(y)).clamp_min(0)
    total = y.sum(-1, keepdim=True)
    uniform = torch.full_like(y, 1.0 / y.shape[-1])
    return torch.where(total > 0, y / torch.where(total > 0, total, torch.ones_like(total)), uniform)


def _fista_start(gram_r, init, max_iter, tol) -> torch.Tensor:
    """FISTA on the simplex from ``init``, weights below 1e-6 of the largest cut (Wolfe would
    drop them one per step)."""

    def fun(lam):
        glam = (gram_r @ lam.unsqueeze(-1)).squeeze(-1)
        return 0.5 * (lam * glam).sum(-1), glam

    # 1/trace ≤ 1/λ_max is a safe first step; the line search grows it.
    step0 = 1.0 / torch.diagonal(gram_r, dim1=-2, dim2=-1).sum(-1)
    lam = minimize_on_simplex(fun, init.to(gram_r), step0, max_iter=max_iter, tol=tol)
    lam = torch.where(lam > 1e-6 * lam.amax(-1, keepdim=True), lam, torch.zeros_like(lam))
    return lam / lam.sum(-1, keepdim=True)


def min_norm(
    gram: torch.Tensor,
    rho: float = 0.0,
    max_iter: int = 500,
    tol: float = 1e-8,
    init: torch.Tensor | None = None,
) -> torch.Tensor:
    """Weights λ ∈ Δ_K minimising ½‖Σ λ_k g_k‖² + (ρ/2)‖λ‖² given ``gram`` = [g_i·g_j].

    ``rho`` is in the units of ``gram`` (MoCo's regulariser; 0 gives MGDA). K = 1 returns 1,
    K = 2 the closed form, 2 < K ≤ ``ENUMERATE_MAX_K`` (without ``init``) the exact support
    enumeration, larger K the active-set start (or, from ``init``, at most ``max_iter`` FISTA
    steps), then Wolfe's steps until no row violates the KKT condition by more than
    ``tol``·‖g_k‖‖d‖ (relative, so it means the same at every scale and row-norm spread).
    """
    return min_norm_solve(gram, rho, max_iter, tol, init)[0]


def min_norm_gap(gram: torch.Tensor, lam: torch.Tensor, rho: float = 0.0) -> torch.Tensor:
    """KKT residual of ``lam`` for :func:`min_norm`: the Frank–Wolfe gap on G/s (s = max diag)."""
    k = gram.shape[-1]
    work = gram.to(torch.float64) + rho * torch.eye(k, dtype=torch.float64, device=gram.device)
    work = work / gram_scale(work)
    lam = lam.to(torch.float64)
    return fw_gap(lam, (work @ lam.unsqueeze(-1)).squeeze(-1))
