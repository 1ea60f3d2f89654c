"""Projection onto the dual cone of the gradients, solved on their K×K Gramian.

The dual cone of the rows of J is {x : Jx ≥ 0}. The projection of Jᵀu onto it is Jᵀv with

    v = argmin_{v ≥ u} vᵀ G v,    G = J Jᵀ

(Quinton & Rey, "Jacobian Descent for Multi-Objective Optimization", arXiv 2406.16232,
Proposition 1), a quadratic program with box (v ≥ u) constraints only. UPGrad solves it for
u = p_i e_i (one per row), DualProj for the preference u = p.

As in :mod:`morl.solvers.min_norm`, the QP is solved in float64 on the equilibrated Gramian
Ĝ = D⁻¹GD⁻¹ + ρI (D = diag‖g_k‖, ρ = :func:`ridge_for` the Gramian's dtype) in the variable
z = Dv ≥ c = Du, so rows whose norms differ by 1e6 are solved as accurately as equal ones and
the weights do not depend on the gradients' scale. By the KKT conditions the ridge leaves
g_k·d ≥ −ρ‖g_k‖²v_k.

Small K: exact, by enumerating the free set F (where z > c): on F the gradient vanishes,
Ĝ_FF z_F = −Ĝ_FA c_A. Every candidate is clamped to z ≥ c, so each one is feasible and the
one of least objective is the optimum (its own free set gives it). On CPU, when the
right-hand sides times 2^K free sets are many (UPGrad from K = 7, DualProj from K = 9), the
active-set steps below start from z = c instead (a few K×K solves) and only the problems they
leave unfinished are enumerated. Larger K: accelerated
projected gradient (FISTA, gradient restart) approaches the optimum, the primal-dual
active-set rule (Hintermüller, Ito & Kunisch, SIAM J. Optim. 13(3), 2003; a semismooth
Newton method) give the free set to start from, and primal active-set steps (as Lawson &
Hanson's NNLS, "Solving Least Squares Problems", 1974, ch. 23) make it exact.

One CPU Gramian (UPGrad's and DualProj's case): first a few primal-dual active-set rounds
(Hintermüller, Ito & Kunisch, above: solve on the free set, keep its feasible rows, free the
active rows with negative multipliers; stop at the KKT conditions), from the caller's warm
start (the previous call's free sets: consecutive Jacobians mostly keep them, and then a
round is one K×K solve and its check) or from the rows whose multiplier at z = c is
negative. Small problems (K ≤ 16, B·K² ≤ 1000) run them in Python floats
(:mod:`morl.solvers.dual_cone_host`: on the CPU reading G costs nothing and a torch op on a
K×K tensor is ~2 µs of dispatch), larger ones batched in torch. Problems the rounds do not
settle go to the solvers above; the answer is the optimum either way.

Cost: each active-set step solves one masked K×K system per unfinished problem. Full-rank
problems need a few steps (K = 100, D = 300: 0.10 s for UPGrad's 100 QPs on one CPU thread);
K ≫ rank(G) needs about one step per row whose bound changes (K = 100, rank 40: 1.4 s;
K = 200, rank 40: ~18 s).
"""

from __future__ import annotations

import torch

from morl.host_reads import reads_are_free
from morl.solvers.dual_cone_host import HOST_MAX_K, HOST_MAX_WORK, project_host
from morl.solvers.gramian import gram_scale
from morl.solvers.min_norm import TIE, equilibrate, quad, ridge_for, support_masks

#: Up to this K the QP is solved exactly by enumerating the 2^K free sets (one batched solve
#: for all right-hand sides); above it the iterative solver.
EXACT_MAX_K = 10
#: On CPU, with one Gramian, when B·2^K (B right-hand sides) exceeds this, a K ≤ EXACT_MAX_K
#: problem goes to the active-set steps from z = c instead (no FISTA: at K ≤ 10 they finish in
#: a few K×K solves, 2K + 10 at most), and the problems they leave unfinished (degenerate
#: Gramians, rare) are enumerated: the result is the optimum as before. Measured (1 thread,
#: float32 Gramians of the bench's matrices at D = 1e4, ms, enumeration / active set): B = K
#: (UPGrad) K = 5 0.32 / 0.36, K = 6 0.39 / 0.36, K = 8 1.15 / 0.37, K = 10 8.1 / 0.37; B = 1
#: (DualProj) K = 7 0.35 / 0.33, K = 8 0.47 / 0.33, K = 10 2.1 / 0.34. The times cross near
#: 200; 400 keeps the enumeration (and its tie rule, which picks the same v among equally good
#: ones at any scale when G is singular) where it costs at most ~0.05 ms more.
ENUMERATE_MAX_SETS = 400
#: Step lengths tried along the projection arc in the active-set phase (Bertsekas 1982).
ARC_STEPS = (1.0, 0.5, 0.25, 0.125, 0.0625)
#: On CPU, with one Gramian, up to this many primal-dual active-set rounds (:func:`pdas_steps`,
#: one batched K×K solve each) run first, at every K, from the caller's warm start or from the
#: rows whose multiplier at z = c is negative; the problems they leave unfinished go to the
#: solvers above. 0 turns them off.
PDAS_ROUNDS = 6


def project_to_dual_cone(
    gram: torch.Tensor, u: torch.Tensor, max_iter: int = 100, tol: float = 1e-10, exact_max_k: int = EXACT_MAX_K,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(v, converged)``: v = argmin_{v ≥ u} vᵀGv for each row of ``u``.

    ``gram`` is [..., K, K] (any scale, any float dtype: it sets the ridge), ``u`` is
    [..., B, K] (B right-hand sides sharing the Gramian). ``v`` is float64 [..., B, K];
    ``converged`` [..., B] is False where the iterative solver (K > ``exact_max_k``) stopped
    before no active row had a multiplier below −``tol`` (relative to the problem's own scale).
    """
    return project_with_free_set(gram, u, max_iter, tol, exact_max_k)[:2]


def project_with_free_set(
    gram: torch.Tensor, u: torch.Tensor, max_iter: int = 100, tol: float = 1e-10, exact_max_k: int = EXACT_MAX_K,
    free_start: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`project_to_dual_cone` with a warm start: ``(v, converged, free)``, ``free``
    ([..., B, K] bools) the rows above their bound at the optimum. Passing the previous call's
    ``free`` as ``free_start`` (same shape) lets a CPU solve whose optimal free set has not
    changed finish in one K×K solve (:func:`pdas_steps`); a wrong start only costs rounds."""
    if PDAS_ROUNDS and _host_sized(gram, u):
        found = project_host(gram.tolist(), u.tolist(), ridge_for(gram.dtype), tol, PDAS_ROUNDS, _start_list(free_start, u))
        if found is not None:
            v, free = found
            return (torch.tensor(v, dtype=torch.float64), torch.ones(len(v), dtype=torch.bool), torch.tensor(free, dtype=torch.bool))
    g = gram.to(torch.float64)
    # non-finite input (zeroed by the caller's check_finite="skip"): a singular solve raises
    g = torch.where(torch.isfinite(g).all((-2, -1), keepdim=True), g, torch.zeros_like(g))
    g_hat, d = equilibrate(g / gram_scale(g), ridge_for(gram.dtype))
    d = d.unsqueeze(-2)
    c = u.to(torch.float64) * d
    if PDAS_ROUNDS and _one_cpu_problem(g_hat, c):
        if free_start is None or free_start.shape != c.shape:
            free_start = (c @ g_hat) < 0  # the rows whose multiplier at z = c is negative
        z, converged, free = pdas_steps(g_hat, c, free_start, tol, PDAS_ROUNDS)
        idx = (~converged).nonzero().squeeze(-1)  # a CPU read: free
        if idx.numel():  # rounds that did not settle (cycling, degenerate G): the solvers below
            z[idx], converged[idx] = _solve(g_hat, c[idx], max_iter, tol, exact_max_k)
            free[idx] = z[idx] > c[idx]
        return z / d, converged, free
    z, converged = _solve(g_hat, c, max_iter, tol, exact_max_k)
    return z / d, converged, z > c


def _solve(g_hat: torch.Tensor, c: torch.Tensor, max_iter: int, tol: float, exact_max_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(z, converged)`` by enumeration (K ≤ ``exact_max_k``, with the active-set steps first
    where :func:`_active_set_first` says) or by the iterative solver."""
    k = g_hat.shape[-1]
    if k <= exact_max_k and _active_set_first(g_hat, c):
        z, converged = dual_cone_iterative(g_hat, c, 0, tol)
        idx = (~converged).nonzero().squeeze(-1)  # a CPU read: free
        if idx.numel():
            z[idx] = dual_cone_exact(g_hat, c[idx])
        return z, torch.ones_like(converged)
    if k <= exact_max_k:
        z = dual_cone_exact(g_hat, c)
        return z, torch.ones(z.shape[:-1], dtype=torch.bool, device=z.device)
    return dual_cone_iterative(g_hat, c, max_iter, tol)


def project_rows_host(rows: list[list[float]], u_rows: list[list[float]], ridge: float, tol: float, free_start=None):
    """The Python path of :func:`project_with_free_set` for callers that hold G (finite, one
    CPU Gramian, e.g. from ``morl.aggregators._host.gramian_rows``) and u as lists: ``(v,
    free)`` as lists, or None when the problem is too large for it or was not settled (then
    call :func:`project_with_free_set`). Saves the ~10 tensor conversions around it."""
    if not PDAS_ROUNDS or not _host_fits(len(rows), len(u_rows)):
        return None
    if free_start is not None and (len(free_start) != len(u_rows) or len(free_start[0]) != len(rows)):
        free_start = None
    return project_host(rows, u_rows, ridge, tol, PDAS_ROUNDS, free_start)


def _host_fits(k: int, b: int) -> bool:
    """B problems of size K are cheaper in Python floats: K ≤ HOST_MAX_K and B·K² ≤ HOST_MAX_WORK."""
    return k <= HOST_MAX_K and b * k * k <= HOST_MAX_WORK


def _host_sized(gram: torch.Tensor, u: torch.Tensor) -> bool:
    """One small CPU problem (:func:`_host_fits`): :mod:`morl.solvers.dual_cone_host`."""
    return reads_are_free(gram) and gram.dim() == 2 and u.dim() == 2 and _host_fits(gram.shape[-1], u.shape[0])


def _start_list(free_start: torch.Tensor | None, u: torch.Tensor) -> list | None:
    return free_start.tolist() if free_start is not None and free_start.shape == u.shape else None


def _one_cpu_problem(g_hat: torch.Tensor, c: torch.Tensor) -> bool:
    """One Gramian ([K, K]) and its [B, K] right-hand sides on the CPU, where reading which
    problems are finished costs no synchronisation."""
    return reads_are_free(g_hat) and g_hat.dim() == 2 and c.dim() == 2


def pdas_steps(
    g_hat: torch.Tensor, c: torch.Tensor, free: torch.Tensor, tol: float, rounds: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Primal-dual active-set rounds (Hintermüller, Ito & Kunisch 2003) from the free set
    ``free`` ([B, K], CPU, one Gramian): each round solves every unfinished problem on its free
    set F (y_A = c_A, Ĝ_FF y_F = −Ĝ_FA c_A) and stops it when y is optimal: y_F ≥ c_F and
    every active multiplier (Ĝy)_A ≥ −tol·scale (the KKT conditions, with the tolerances of
    :func:`active_set_steps`); otherwise the next F keeps the feasible free rows and frees the
    active rows with negative multipliers. ``(max(z, c), done [B], free)``: rows not done
    after ``rounds`` (the rule can cycle on degenerate problems) are the caller's to finish."""
    done = None
    for _ in range(rounds):
        if done is None:  # an empty free set everywhere (DualProj's mean inside the cone): y = c, no solve
            y = _free_set_solution(g_hat, c, free, clamp=False) if bool(free.any()) else c.clone()
        else:
            y = _unfinished_solution(g_hat, c, free, z, done)
        mu = y @ g_hat  # (Ĝy)_k, the multiplier of row k where it is active (Ĝ symmetric)
        scale = torch.maximum(c.abs().amax(-1, keepdim=True), (y * mu).sum(-1, keepdim=True).clamp_min(0).sqrt())
        feasible = y >= c - 1e-12 * scale
        wants_in = mu < -tol * scale
        optimal = torch.where(free, feasible, ~wants_in).all(-1)
        z, done = y, optimal if done is None else done | optimal
        if bool(done.all()):
            break
        free = torch.where(done.unsqueeze(-1), free, torch.where(free, feasible, wants_in))
    return torch.maximum(z, c), done, free


def _active_set_first(g_hat: torch.Tensor, c: torch.Tensor) -> bool:
    """True where :data:`ENUMERATE_MAX_SETS` sends a K ≤ EXACT_MAX_K problem to the active-set
    steps: CPU (where finding the unfinished problems costs no sync), one Gramian, many sets."""
    k = g_hat.shape[-1]
    return reads_are_free(g_hat) and g_hat.dim() == 2 and c.dim() == 2 and c.shape[0] * 2**k > ENUMERATE_MAX_SETS


def _free_set_solution(g_hat: torch.Tensor, c: torch.Tensor, free: torch.Tensor, clamp: bool = True) -> torch.Tensor:
    """z with z_A = c_A and Ĝ_FF z_F = −Ĝ_FA c_A (F = the bool mask ``free``), clamped to z ≥ c
    (``clamp``). ``g_hat`` [..., K, K] broadcasts against ``free`` [..., K]; ``c`` against it.
    Off F the system is the identity (one ``where``, 3x cheaper than masking by products)."""
    fixed = torch.where(free, torch.zeros_like(c), c)
    rhs = torch.where(free, -(fixed.unsqueeze(-2) @ g_hat).squeeze(-2), torch.zeros_like(fixed))  # Ĝ symmetric
    eye = torch.eye(g_hat.shape[-1], dtype=g_hat.dtype, device=g_hat.device)
    system = torch.where(free.unsqueeze(-1) & free.unsqueeze(-2), g_hat, eye)
    z = torch.linalg.solve(system, rhs.unsqueeze(-1)).squeeze(-1) + fixed
    return torch.maximum(z, c) if clamp else z


def dual_cone_exact(g_hat: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Exact z = argmin_{z ≥ c} zᵀĜz ([..., B, K]) by enumerating the free sets (small K)."""
    k = g_hat.shape[-1]
    masks = support_masks(k, g_hat.device) > 0
    m = torch.cat([torch.zeros_like(masks[:1]), masks])  # [S, K], the empty free set too
    # [..., S, B, K]: every free set against every right-hand side, one batched solve
    z = _free_set_solution(g_hat.unsqueeze(-3).unsqueeze(-3), c.unsqueeze(-3), m.unsqueeze(-2))
    obj = quad(g_hat.unsqueeze(-3).unsqueeze(-3), z)  # [..., S, B]
    obj = torch.where(torch.isfinite(obj), obj, torch.full_like(obj, float("inf")))
    # Degenerate Gramians have several optimal free sets: take the first within rounding of
    # the optimum so the answer does not flip with the gradients' scale.
    best, arg = obj.min(-2, keepdim=True)
    z_best = torch.gather(z, -3, arg.unsqueeze(-1).expand(*arg.shape, k))  # [..., 1, B, K]
    rounding = 8 * k * torch.finfo(torch.float64).eps * z_best.abs().sum(-1).square()
    tied = obj <= best + TIE * best.abs() + rounding
    first = tied.to(torch.int8).argmax(-2, keepdim=True)  # [..., 1, B]
    return torch.gather(z, -3, first.unsqueeze(-1).expand(*first.shape, k)).squeeze(-3)


def _lipschitz(g_hat: torch.Tensor) -> torch.Tensor:
    """An upper bound on λ_max(Ĝ) ([..., 1, 1]): the smaller of the Frobenius norm and the
    largest absolute row sum (no eigen-solver, so it also runs on every device)."""
    fro = g_hat.square().sum((-2, -1)).sqrt()
    rows = g_hat.abs().sum(-1).amax(-1)
    return torch.minimum(fro, rows).unsqueeze(-1).unsqueeze(-1)


def dual_cone_iterative(g_hat: torch.Tensor, c: torch.Tensor, max_iter: int, tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """FISTA steps from z = c, then active-set steps; ``(z, converged)`` ([..., B, K], [..., B])."""
    g_b = g_hat.unsqueeze(-3)  # broadcasts over the B right-hand sides
    step = 1.0 / _lipschitz(g_hat)
    z = y = c
    t = torch.ones_like(c[..., :1])
    for _ in range(max_iter):
        z_new = torch.maximum(y - step * (y.unsqueeze(-2) @ g_b).squeeze(-2), c)
        # restart the momentum where it points uphill (O'Donoghue & Candès 2015)
        restart = ((y - z_new) * (z_new - z)).sum(-1, keepdim=True) > 0
        t_new = 0.5 * (1 + torch.sqrt(1 + 4 * t * t))
        beta = torch.where(restart, torch.zeros_like(t), (t - 1) / t_new)
        y = z_new + beta * (z_new - z)
        z, t = z_new, torch.where(restart, torch.ones_like(t), t_new)
    # the free set FISTA points to (z − c > Ĝz, the primal-dual active-set guess), made exact
    free = (z - c) > (z.unsqueeze(-2) @ g_b).squeeze(-2)
    return active_set_steps(g_hat, c, torch.where(free, z, c), free, tol, rounds=2 * g_hat.shape[-1] + 10)


def _unfinished_solution(g_hat, c, free, z, done) -> torch.Tensor:
    """The unclamped free-set minimiser of the problems not yet done (``z`` for the others). On
    CPU with one shared Gramian (UPGrad, DualProj) only those are solved: reading the flags is
    free there, and late rounds have few left. Elsewhere every problem is solved (no sync)."""
    if not reads_are_free(z) or g_hat.dim() != 2 or c.dim() != 2:
        return _free_set_solution(g_hat.unsqueeze(-3), c, free, clamp=False)
    idx = (~done).nonzero().squeeze(-1)
    y = z.clone()
    y[idx] = _free_set_solution(g_hat, c[idx], free[idx], clamp=False)
    return y


def active_set_steps(g_hat, c, z, free, tol: float, rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Primal active-set steps (as Lawson & Hanson's NNLS) from the feasible ``z`` with free set
    ``free``. A major step moves to the minimiser on the free set when it is feasible and frees
    every active row whose multiplier (Ĝz)_k is below −tol·scale; otherwise the best of a
    minor step (towards the minimiser until a row hits its bound; that row is fixed) and a
    few steps along the projection arc is taken. The objective never rises. Batched with
    masks, no host sync but the CPU early exit; ``converged`` where a major step freed no row
    (so g_k·d ≥ −tol·scale·‖g_k‖ for every row, scale = max(max|c|, ‖d‖) on G / max diag)."""
    g_b = g_hat.unsqueeze(-3)
    done = torch.zeros(z.shape[:-1], dtype=torch.bool, device=z.device)
    for _ in range(rounds):
        y = _unfinished_solution(g_hat, c, free, z, done)
        scale = torch.maximum(c.abs().amax(-1, keepdim=True), quad(g_b, y).clamp_min(0).sqrt().unsqueeze(-1))
        slack = 1e-12 * scale
        major = ((y >= c - slack) | ~free).all(-1) & ~done
        mu = torch.where(free, torch.zeros_like(y), (y.unsqueeze(-2) @ g_b).squeeze(-2))
        # every active row with a negative multiplier enters at once (a block step): the
        # objective still drops at each major step, so no free set repeats, and K > D
        # problems with many rows to free finish in a few steps instead of one per row
        entering = (mu < -tol * scale) & major.unsqueeze(-1)
        adds = entering.any(-1)
        minor = ~major & ~done
        # on CPU (flags free to read) a round where every unfinished problem takes a major step
        # skips the minor and arc steps: 6 more quadratic forms, most of a round at small K
        if reads_are_free(z) and not bool(minor.any()):
            z = torch.where(major.unsqueeze(-1), torch.maximum(y, c), z)
            free = free | entering
            done = done | (major & ~adds)
            if bool(done.all()):
                break
            continue
        ratio = torch.where(free & (y < c), (z - c) / (z - y), torch.full_like(y, float("inf")))
        theta = ratio.amin(-1, keepdim=True).clamp(0.0, 1.0)
        z_minor = torch.maximum(z + theta * (y - z), c)
        z_minor = torch.where(ratio <= theta, c, z_minor)  # the blocking rows sit on their bound
        free_minor = free & (ratio > theta)
        # steps along the projection arc max(z + α(y − z), c) fix many rows at once (a minor
        # step fixes one); the best of them replaces the minor step where it is lower
        obj_minor = quad(g_b, z_minor)
        for alpha in ARC_STEPS:
            z_arc = torch.maximum(z + alpha * (y - z), c)
            obj_arc = quad(g_b, z_arc)
            better = (obj_arc < obj_minor).unsqueeze(-1)
            z_minor = torch.where(better, z_arc, z_minor)
            free_minor = torch.where(better, free & (z_arc > c), free_minor)
            obj_minor = torch.minimum(obj_arc, obj_minor)
        z = torch.where(major.unsqueeze(-1), torch.maximum(y, c), torch.where(minor.unsqueeze(-1), z_minor, z))
        free = torch.where(minor.unsqueeze(-1), free_minor, free | entering)
        # no early exit here: a problem that took a minor step this round is not done (on the
        # CPU, rounds without any minor step exit through the shortcut above)
        done = done | (major & ~adds)
    return z, done


def with_trace_ridge(gram: torch.Tensor, reg_eps: float) -> torch.Tensor:
    """G + reg_eps·tr(G)·I: TorchJD's ``regularize(normalize(G))`` = G/tr(G) + reg_eps·I up to
    the scale, which the projection weights do not depend on. ``reg_eps`` = 0 returns G."""
    if not reg_eps:
        return gram
    trace = torch.diagonal(gram, dim1=-2, dim2=-1).sum(-1)[..., None, None]
    return gram + reg_eps * trace * torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
