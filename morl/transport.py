"""Optimal transport between objectives (rows) and solutions (columns), in torch on any device.

MosT assigns ``n`` objectives to ``m`` models by a transport plan ``Γ ∈ R_+^{n×m}`` with row
marginal ``a`` (Γ1 = a) and column marginal ``b`` (Γᵀ1 = b):

    min_Γ  <C, Γ> + τ R(Γ),      R(Γ) = −Σ_i max_j Γ_ij          (MosT Eq. 5, 4)

Solvers (all log-domain, so raw losses as costs never underflow):

* :func:`ipot` — inexact proximal point (Xie et al. 2020): converges to the *exact* (unregularised)
  plan; the solver the MosT paper names. Default.
* :func:`sinkhorn` — entropic OT ``<C, Γ> − ε H(Γ)``; soft plans, fast.
* :func:`solve` — the entry point: validates input, scales the cost, runs the chosen solver, for
  ``τ > 0`` runs the majorise–minimise (conditional-gradient) loop of the diversity regulariser,
  rounds the plan onto the constraint set, and checks both marginals. Mass is never lost
  silently: a violation raises :class:`TransportError` (or warns / is only reported, on request).

Shapes: ``cost [..., n, m]``, ``a [..., n]``, ``b [..., m]``; :func:`sinkhorn` and :func:`ipot`
accept leading batch dimensions, :func:`solve` takes one problem.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

SOLVERS = ("ipot", "sinkhorn")
ON_VIOLATION = ("raise", "warn", "report")


class TransportError(RuntimeError):
    """A transport plan violates its marginals (mass lost or created) or is not finite."""


@dataclass
class TransportResult:
    """A solved plan and its diagnostics (tensors stay on the cost's device)."""

    plan: torch.Tensor  #: Γ [n, m]
    objective: torch.Tensor  #: <C, Γ> + τ R(Γ), scalar, in the units of the *given* cost
    marginal_error: torch.Tensor  #: max(|Γ1 − a|, |Γᵀ1 − b|) / total mass, scalar
    iterations: int  #: solver iterations (inner iterations summed over the τ > 0 outer loop)
    outer_iterations: int  #: majorise–minimise steps for τ > 0 (0 when τ = 0)


# --------------------------------------------------------------------------------------------
# checks and helpers


def _check_problem(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    if not isinstance(cost, torch.Tensor) or cost.dim() < 2:
        raise ValueError(
            f"cost must be a tensor of shape [..., n, m], got {getattr(cost, 'shape', type(cost).__name__)}"
        )
    if not cost.is_floating_point():
        raise ValueError(f"cost must be floating point, got dtype {cost.dtype}")
    n, m = cost.shape[-2:]
    if a.shape[-1] != n or b.shape[-1] != m:
        raise ValueError(
            f"marginals must have shapes [..., {n}] and [..., {m}] for a cost of shape {tuple(cost.shape)}; got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if not bool(torch.isfinite(cost).all()):
        raise ValueError("cost has NaN/inf entries; every objective/model loss must be finite")
    if bool((a < 0).any()) or bool((b < 0).any()):
        raise ValueError("marginals a and b must be non-negative")
    sa, sb = a.sum(-1), b.sum(-1)
    if bool((sa <= 0).any()) or not bool(torch.allclose(sa, sb, rtol=1e-5, atol=0.0)):
        raise ValueError(
            f"marginals must have equal positive total mass; got sum(a)={sa.tolist()} and sum(b)={sb.tolist()}"
        )


def _log_floor(dtype: torch.dtype) -> float:
    return 0.8 * math.log(torch.finfo(dtype).tiny)


def _safe_log(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x.clamp_min(torch.finfo(x.dtype).tiny).log(), torch.full_like(x, -math.inf))


def marginal_error(plan: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``max(‖Γ1 − a‖∞, ‖Γᵀ1 − b‖∞) / sum(a)`` per problem (relative, device tensor)."""
    err_a = (plan.sum(-1) - a).abs().amax(-1)
    err_b = (plan.sum(-2) - b).abs().amax(-1)
    return torch.maximum(err_a, err_b) / a.sum(-1)


def check_marginals(
    plan: torch.Tensor, a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5, on_violation: str = "raise"
) -> torch.Tensor:
    """Verify Γ ≥ 0, finite, Γ1 = a, Γᵀ1 = b to relative tolerance ``tol``; returns the error.

    ``on_violation``: ``"raise"`` (:class:`TransportError`), ``"warn"`` or ``"report"`` (only
    return the error). This reads one value back from the device.
    """
    if on_violation not in ON_VIOLATION:
        raise ValueError(f"on_violation={on_violation!r} is not valid; allowed: {', '.join(ON_VIOLATION)}")
    err = marginal_error(plan, a, b)
    if on_violation == "report":
        return err
    finite = bool(torch.isfinite(plan).all())
    worst = float(err.max()) if finite else math.inf
    if not finite or worst > tol or bool((plan < 0).any()):
        msg = (
            f"transport plan violates its marginals: relative error {worst:.3g} > tol {tol:g} "
            f"(total mass {float(a.sum(-1).max()):.6g}); plan finite={finite}"
        )
        if on_violation == "raise":
            raise TransportError(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return err


def round_to_marginals(plan: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Project an approximate plan onto Ω = {Γ ≥ 0, Γ1 = a, Γᵀ1 = b} (Altschuler et al. 2017, Alg. 2).

    Scales down over-full rows, then over-full columns, then adds the rank-one correction
    ``err_a err_bᵀ / ‖err_a‖₁``. The result is feasible up to floating point and differs from
    ``plan`` by at most twice the marginal violation in L1.
    """
    tiny = torch.finfo(plan.dtype).tiny
    x = torch.clamp(a / plan.sum(-1).clamp_min(tiny), max=1.0)
    plan = plan * x.unsqueeze(-1)
    y = torch.clamp(b / plan.sum(-2).clamp_min(tiny), max=1.0)
    plan = plan * y.unsqueeze(-2)
    err_a = (a - plan.sum(-1)).clamp_min(0)
    err_b = (b - plan.sum(-2)).clamp_min(0)
    mass = err_a.sum(-1, keepdim=True).unsqueeze(-1).clamp_min(tiny)
    return plan + err_a.unsqueeze(-1) * err_b.unsqueeze(-2) / mass


def diversity_regulariser(plan: torch.Tensor) -> torch.Tensor:
    """R(Γ) = −Σ_i max_j Γ_ij (MosT Eq. 4); smaller is more "one model per objective"."""
    return -plan.amax(-1).sum(-1)


def _scaling_updates(log_k, log_a, log_b, f, g, iters: int):
    # Log-domain Sinkhorn scaling on kernel exp(log_k): plan = exp(f + log_k + g).
    for _ in range(iters):
        f = log_a - torch.logsumexp(log_k + g.unsqueeze(-2), dim=-1)
        g = log_b - torch.logsumexp(log_k + f.unsqueeze(-1), dim=-2)
    return f, g


# --------------------------------------------------------------------------------------------
# solvers


def sinkhorn(
    cost: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    eps: float = 1e-2,
    max_iter: int = 2000,
    tol: float = 1e-7,
    check_every: int = 20,
    potentials: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], int]:
    """Entropic OT ``min <C, Γ> − ε H(Γ)`` by log-domain Sinkhorn.

    Returns ``(plan, (f, g), iterations)``. ``f, g`` are the scaled dual potentials (log scalings);
    pass them back as ``potentials`` to warm-start the next solve. Stops when the row-marginal
    error (checked every ``check_every`` iterations, one host read each) is below ``tol`` relative
    to the total mass, or after ``max_iter`` iterations. The column marginal is exact after every
    iteration.
    """
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    log_a, log_b = _safe_log(a), _safe_log(b)
    log_k = -cost / eps
    f, g = potentials if potentials is not None else (torch.zeros_like(a), torch.zeros_like(b))
    done = 0
    while done < max_iter:
        step = min(check_every, max_iter - done)
        f, g = _scaling_updates(log_k, log_a, log_b, f, g, step)
        done += step
        plan = torch.exp(f.unsqueeze(-1) + log_k + g.unsqueeze(-2))
        if float(marginal_error(plan, a, b).max()) < tol:
            break
    return torch.exp(f.unsqueeze(-1) + log_k + g.unsqueeze(-2)), (f, g), done


def ipot(
    cost: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    step: float = 0.01,
    max_iter: int = 200,
    inner_iter: int = 1,
    tol: float = 1e-9,
    check_every: int = 50,
    plan0: torch.Tensor | None = None,
) -> tuple[torch.Tensor, int]:
    """Exact OT by the inexact proximal-point method IPOT (Xie et al. 2020), in the log domain.

    Each outer step solves ``min <C, Γ> + step · KL(Γ ‖ Γ_t)`` approximately by ``inner_iter``
    Sinkhorn scalings of the kernel ``Γ_t ⊙ exp(−C/step)`` (scalings warm-started across steps).
    ``step`` is relative to the cost's scale; :func:`solve` divides the cost by its largest entry
    first. Stops when the plan changes by less than ``tol`` · mass in L1 (checked every
    ``check_every`` steps) or after ``max_iter`` steps. Returns ``(plan, iterations)``.
    ``plan0`` warm-starts the proximal centre (a previous round's plan); it must be strictly
    positive where mass may move, so zeros are lifted to a tiny floor.
    """
    if step <= 0:
        raise ValueError(f"step must be > 0, got {step}")
    n, m = cost.shape[-2:]
    mass = a.sum(-1, keepdim=True).unsqueeze(-1)
    log_a, log_b = _safe_log(a), _safe_log(b)
    if plan0 is None:
        log_p = torch.log(mass.expand_as(cost) / (n * m))
    else:
        floor = 1e-12 * mass / (n * m)
        log_p = torch.log(torch.maximum(plan0.to(cost), floor))
    log_kernel = -cost / step
    f, g = torch.zeros_like(a), torch.zeros_like(b)
    done, prev = 0, torch.exp(log_p)
    while done < max_iter:
        for _ in range(min(check_every, max_iter - done)):
            log_q = log_p + log_kernel
            f, g = _scaling_updates(log_q, log_a, log_b, f, g, inner_iter)
            # Floor far below any meaningful mass but above the subnormal range, where
            # arithmetic is orders of magnitude slower.
            log_p = (f.unsqueeze(-1) + log_q + g.unsqueeze(-2)).clamp_min(_log_floor(log_q.dtype))
            done += 1
        plan = torch.exp(log_p)
        change = ((plan - prev).abs().sum((-2, -1)) / mass.squeeze(-1).squeeze(-1)).max()
        if float(change) < tol:
            break
        prev = plan
    return torch.exp(log_p), done


# --------------------------------------------------------------------------------------------
# entry point


def solve(
    cost: torch.Tensor,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
    tau: float = 0.0,
    method: str = "ipot",
    plan0: torch.Tensor | None = None,
    max_outer: int = 20,
    tol: float = 1e-5,
    on_violation: str = "raise",
    round_plan: bool = True,
    **solver_options,
) -> TransportResult:
    """Solve the MosT transport problem ``min_{Γ∈Ω} <C, Γ> + τ R(Γ)`` for one ``[n, m]`` cost.

    Args:
        cost: ``C [n, m]`` (e.g. ``C_ij = L_i(θ_j)``); any finite real values.
        a, b: marginals ``[n]`` and ``[m]`` with equal total mass; default uniform ``1/n`` and ``1/m``.
        tau: weight of the diversity regulariser ``R(Γ) = −Σ_i max_j Γ_ij`` (τ ≥ 0).
        method: ``"ipot"`` (exact OT, default) or ``"sinkhorn"`` (entropic; option ``eps``).
        plan0: warm start (previous plan), used by IPOT and as the first linearisation point.
        max_outer: majorise–minimise steps for τ > 0.
        tol: relative marginal tolerance for the final check.
        on_violation: ``"raise"`` | ``"warn"`` | ``"report"`` (see :func:`check_marginals`).
        round_plan: project the solver's plan exactly onto Ω (:func:`round_to_marginals`).
        **solver_options: passed to :func:`ipot` (``step``, ``max_iter``, ``inner_iter``, ``tol``)
            or :func:`sinkhorn` (``eps``, ``max_iter``, ``tol``).

    For τ > 0, R is concave, so linearising it at the current plan gives an upper bound that is
    tight there (majorise–minimise, the conditional-gradient step of MosT's code with a unit step,
    which is optimal for a concave objective on a segment). Each step solves a *linear* OT with
    cost ``C − τ·1[j = argmax_j′ Γ_ij′]`` and the objective never increases; the loop stops when
    the row-wise argmax pattern repeats. It is a local method (R is concave).
    """
    if method not in SOLVERS:
        raise ValueError(f"method={method!r} is not valid; allowed: {', '.join(SOLVERS)}")
    if tau < 0 or not math.isfinite(tau):
        raise ValueError(f"tau must be a finite number >= 0, got {tau}")
    if cost.dim() != 2:
        raise ValueError(f"solve takes one cost matrix of shape [n, m], got {tuple(cost.shape)}")
    n, m = cost.shape
    a = torch.full((n,), 1.0 / n, dtype=cost.dtype, device=cost.device) if a is None else a.to(cost)
    b = torch.full((m,), 1.0 / m, dtype=cost.dtype, device=cost.device) if b is None else b.to(cost)
    _check_problem(cost, a, b)
    # Solve in float64 (tiny plan entries stay out of float32's slow subnormal range) and
    # scale-free: the proximal step / ε are relative to the largest |cost| and to unit mass.
    out_dtype = cost.dtype
    cost, a, b = cost.double(), a.double(), b.double()
    plan0 = None if plan0 is None else plan0.double()
    mass = a.sum()
    scale = cost.abs().amax().clamp_min(torch.finfo(cost.dtype).tiny)
    an, bn = a / mass, b / mass
    p0 = None if plan0 is None else plan0.to(cost) / mass

    def linear_ot(c: torch.Tensor, warm: torch.Tensor | None) -> tuple[torch.Tensor, int]:
        if method == "ipot":
            return ipot(c / scale, an, bn, plan0=warm, **solver_options)
        plan, _, it = sinkhorn(c / scale, an, bn, **solver_options)
        return plan, it

    def feasible(p: torch.Tensor) -> torch.Tensor:
        # MM compares the plans it will return: rounding an inexact solver's plan onto Ω can move
        # the objective a lot (IPOT on C − τ·1[argmax] once ended 0.5 above the unregularised plan)
        return round_to_marginals(p * mass, a, b) / mass if round_plan else p

    plan, iters = linear_ot(cost, p0)
    outer = 0
    if tau > 0:
        plan = feasible(plan)
        objective = (cost * plan).sum() + tau * diversity_regulariser(plan)
        pattern = plan.argmax(-1)
        for outer in range(1, max_outer + 1):  # noqa: B007 (reported after the loop)
            onehot = torch.nn.functional.one_hot(pattern, m).to(cost)
            # The inner problem is at unit mass; <C,Γ> + τR(Γ) is homogeneous in the mass, so the
            # linearised cost C + τ∇R(Γ) = C − τ·1[argmax] is the same at any mass.
            candidate, it = linear_ot(cost - tau * onehot, plan)
            candidate = feasible(candidate)
            iters += it
            cand_obj = (cost * candidate).sum() + tau * diversity_regulariser(candidate)
            if bool(cand_obj > objective + 1e-12 * objective.abs()):
                break
            plan, objective = candidate, cand_obj
            new_pattern = plan.argmax(-1)
            if bool((new_pattern == pattern).all()):
                break
            pattern = new_pattern
    plan = plan * mass
    if round_plan:
        plan = round_to_marginals(plan, a, b)
    err = check_marginals(plan, a, b, tol=tol, on_violation=on_violation)
    objective = (cost * plan).sum() + tau * diversity_regulariser(plan)
    return TransportResult(
        plan=plan.to(out_dtype),
        objective=objective.to(out_dtype),
        marginal_error=err,
        iterations=iters,
        outer_iterations=outer,
    )


__all__ = [
    "SOLVERS",
    "TransportError",
    "TransportResult",
    "solve",
    "ipot",
    "sinkhorn",
    "round_to_marginals",
    "check_marginals",
    "marginal_error",
    "diversity_regulariser",
]
