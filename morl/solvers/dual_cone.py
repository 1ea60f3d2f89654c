"""Projection onto the dual cone {x : Jx ≥ 0} of the gradients, on their K×K Gramian.

The projection of Jᵀu is Jᵀv with v = argmin_{v ≥ u} vᵀGv (Quinton & Rey, arXiv 2406.16232,
Prop. 1): UPGrad solves it for u = p_i e_i (K right-hand sides), DualProj for u = p. It is solved
in float64 on the equilibrated Ĝ = D⁻¹GD⁻¹ + ρI (D = diag‖g_k‖) in z = Dv ≥ c = Du, so the ridge
leaves g_k·d ≥ −ρ‖g_k‖²v_k. K ≤ :data:`EXACT_MAX_K`: exact, by enumerating the 2^K free sets.
Larger K: primal active-set steps from z = c (Lawson & Hanson's NNLS, 1974, ch. 23, with
Bertsekas' projection arc), exact when they stop, ~K⁴ work for UPGrad.
"""

import warnings

import torch

from morl.host_reads import reads_are_free
from morl.solvers.gramian import gram_scale
from morl.solvers.min_norm import equilibrate, ridge_for

#: up to this K the 2^K free sets are enumerated; above, active-set steps are cheaper
#: (K = 10, one thread: 2 ms against 17 ms for the 1024 sets)
EXACT_MAX_K = 5
#: step lengths tried along the projection arc max(z + α(y − z), c) (Bertsekas 1982)
ARC_STEPS = (1.0, 0.5, 0.25, 0.125, 0.0625)
#: objectives within this relative gap of the least count as tied
TIE = 1e-9
#: seconds per B·K³ of one active-set step (B masked K×K solves) on one CPU thread
STEP_SECONDS = 0.25 / 200**4


def with_trace_ridge(gram: torch.Tensor, reg_eps: float) -> torch.Tensor:
    """G + reg_eps·tr(G)·I: TorchJD's ``regularize(normalize(G))`` up to a scale the weights ignore."""
    if not reg_eps:
        return gram
    trace = torch.diagonal(gram, dim1=-2, dim2=-1).sum(-1)[..., None, None]
    return gram + reg_eps * trace * torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)


def warn_if_slow(owner: str, k: int, rhs: int) -> bool:
    """Warn when a K-row projection with ``rhs`` right-hand sides may take over ~5 s; True if it did."""
    step = STEP_SECONDS * rhs * k**3
    if k <= EXACT_MAX_K or step * k / 2 <= 5.0:
        return False
    warnings.warn(
        f"{owner} with K={k} objectives: each active-set step solves {rhs} masked K×K systems (~{step:.2f} s on "
        f"one CPU thread), ~1.5 steps for independent rows, up to ~K/2 when K ≫ rank: expect "
        f"{1.5 * step:.1f} to {step * k / 2:.0f} s per call",
        UserWarning,
        stacklevel=3,
    )
    return True


def project_to_dual_cone(
    gram: torch.Tensor,
    u: torch.Tensor,
    max_iter: int = 100,
    tol: float = 1e-10,
    exact_max_k: int = EXACT_MAX_K,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(v, converged)``: v = argmin_{v ≥ u} vᵀGv (float64 [..., B, K]) for ``gram`` [..., K, K]
    and the B rows of ``u``; ``converged`` is False where the iterative solver stopped with an
    active row whose multiplier is below −``tol`` (relative)."""
    g = gram.to(torch.float64)
    # non-finite input (check_finite="skip" zeroes the result): a singular solve would raise
    g = torch.where(torch.isfinite(g).all((-2, -1), keepdim=True), g, 0.0)
    g_hat, d = equilibrate(g / gram_scale(g), ridge_for(gram.dtype))
    c = u.to(torch.float64) * d.unsqueeze(-2)
    if g.shape[-1] <= exact_max_k:
        z = dual_cone_exact(g_hat, c)
        converged = torch.ones(z.shape[:-1], dtype=torch.bool, device=z.device)
    else:
        z, converged = dual_cone_iterative(g_hat, c, max_iter, tol)
    return z / d.unsqueeze(-2), converged


def _quad(g_hat: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """zᵀĜz for each row of ``z`` [..., B, K] (``g_hat`` [..., K, K]: one product for all B)."""
    return ((z @ g_hat) * z).sum(-1)


def _free_set_solution(g_hat: torch.Tensor, c: torch.Tensor, free: torch.Tensor) -> torch.Tensor:
    """y with y_A = c_A and Ĝ_FF y_F = −Ĝ_FA c_A (F the mask ``free``), unclamped."""
    fixed = torch.where(free, 0.0, c)
    rhs = torch.where(free, -(fixed @ g_hat), 0.0)  # Ĝ symmetric
    eye = torch.eye(g_hat.shape[-1], dtype=g_hat.dtype, device=g_hat.device)
    system = torch.where(free.unsqueeze(-1) & free.unsqueeze(-2), g_hat.unsqueeze(-3), eye)
    return torch.linalg.solve(system, rhs.unsqueeze(-1)).squeeze(-1) + fixed


def dual_cone_exact(g_hat: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Exact z = argmin_{z ≥ c} zᵀĜz ([..., B, K]) by enumerating the 2^K free sets."""
    k = g_hat.shape[-1]
    sets = torch.arange(2**k, device=g_hat.device)
    masks = ((sets.unsqueeze(-1) >> torch.arange(k, device=g_hat.device)) & 1).bool()  # [S, K]
    g_s = g_hat.unsqueeze(-3)  # against [..., S, B, K]
    z = torch.maximum(_free_set_solution(g_s, c.unsqueeze(-3), masks.unsqueeze(-2)), c.unsqueeze(-3))
    obj = _quad(g_s, z)
    obj = torch.where(torch.isfinite(obj), obj, float("inf"))
    # degenerate Gramians have several optimal free sets: take the first within rounding
    best, arg = obj.min(-2, keepdim=True)
    z_best = torch.gather(z, -3, arg.unsqueeze(-1).expand(*arg.shape, k))
    rounding = 8 * k * torch.finfo(torch.float64).eps * z_best.abs().sum(-1).square()
    first = (obj <= best + TIE * best.abs() + rounding).to(torch.int8).argmax(-2, keepdim=True)
    return torch.gather(z, -3, first.unsqueeze(-1).expand(*first.shape, k)).squeeze(-3)


def dual_cone_iterative(
    g_hat: torch.Tensor, c: torch.Tensor, max_iter: int, tol: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Active-set steps from z = c with the rows of negative multiplier (cĜ)_k freed;
    ``(z, converged)`` ([..., B, K], [..., B]); at least ``max_iter`` and 2K + 10 rounds."""
    free = (c @ g_hat) < 0
    return active_set_steps(g_hat, c, c, free, tol, rounds=max(max_iter, 2 * g_hat.shape[-1] + 10))


def active_set_steps(g_hat, c, z, free, tol: float, rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Primal active-set steps from the feasible ``z``: a major step moves to the free-set
    minimiser y when feasible and frees every active row with multiplier below −tol·scale;
    else the lower of a minor step (to the first bound hit) and the arc points. ``converged``
    where a major step freed no row."""
    done = torch.zeros(z.shape[:-1], dtype=torch.bool, device=z.device)
    for step in range(rounds):
        # one CPU Gramian: finished problems stop (a free read; none is finished before the first step)
        if step and reads_are_free(done) and g_hat.dim() == 2:
            idx = (~done).nonzero().squeeze(-1)
            y = z.clone()
            y[idx] = _free_set_solution(g_hat, c[idx], free[idx])
        else:
            y = _free_set_solution(g_hat, c, free)
        scale = torch.maximum(c.abs().amax(-1, keepdim=True), _quad(g_hat, y).clamp_min(0).sqrt().unsqueeze(-1))
        major = ((y >= c - 1e-12 * scale) | ~free).all(-1) & ~done
        mu = torch.where(free, 0.0, y @ g_hat)
        # every active row with a negative multiplier enters at once (a block step)
        entering = (mu < -tol * scale) & major.unsqueeze(-1)
        minor = ~major & ~done
        if reads_are_free(done) and not bool(minor.any()):  # no minor step to take: its ~60 ops skipped
            z_minor, free_minor = z, free
        else:
            z_minor, free_minor = _minor_step(g_hat, c, z, y, free)
        z = torch.where(major.unsqueeze(-1), torch.maximum(y, c), torch.where(minor.unsqueeze(-1), z_minor, z))
        free = torch.where(minor.unsqueeze(-1), free_minor, free | entering)
        done = done | (major & ~entering.any(-1))
        if reads_are_free(done) and bool(done.all()):
            break
    return z, done


def _minor_step(g_hat, c, z, y, free) -> tuple[torch.Tensor, torch.Tensor]:
    """(z, free set) after the lower of a step towards ``y`` to the first bound and the arc points."""
    ratio = torch.where(free & (y < c), (z - c) / (z - y), float("inf"))
    theta = ratio.amin(-1, keepdim=True).clamp(0.0, 1.0)
    z_minor = torch.where(ratio <= theta, c, torch.maximum(z + theta * (y - z), c))  # blocking rows on their bound
    free_minor = free & (ratio > theta)
    obj_minor = _quad(g_hat, z_minor)
    for alpha in ARC_STEPS:  # the arc fixes many rows at once where a minor step fixes one
        z_arc = torch.maximum(z + alpha * (y - z), c)
        obj_arc = _quad(g_hat, z_arc)
        better = (obj_arc < obj_minor).unsqueeze(-1)
        z_minor = torch.where(better, z_arc, z_minor)
        free_minor = torch.where(better, free & (z_arc > c), free_minor)
        obj_minor = torch.minimum(obj_arc, obj_minor)
    return z_minor, free_minor
