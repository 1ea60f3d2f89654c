"""The MosT paper's multi-solution baselines for few objectives (ZDT; Li et al., arXiv:2403.04099,
§6.1 and App. C.1, D.1).

Each baseline trains ``m`` models independently, model ``j`` following its own descent direction
from its ``n`` per-objective gradients — the same conventions as :func:`morl.most.run`
(``objectives: θ [D] -> [n]``, ``thetas [m, D]``, optional ``project`` and ``step="sign"``):

* :func:`linearisation` — model ``j`` minimises ``Σ_i w_ji L_i`` with fixed weights ``W [m, n]``
  (default :func:`simplex_weights`: evenly spread inside the simplex);
* :func:`mgda` — each model follows the MGDA min-norm direction (``aggregators.build("mgda")``);
* :func:`epo` — each model runs EPO-AL with its own preference vector
  (``aggregators.build("epo_al", preference=r_j)``; default :func:`circle_preferences`);
* :func:`svgd` — MOO-SVGD (Liu, Tong & Liu, NeurIPS 2021): the ``m`` models are interacting
  particles. Particle ``i`` descends ``v_i = (1/m) Σ_j [k_ij d_j + α ∇_{θ_i} k(θ_i, θ_j)]`` with
  ``d_j`` particle ``j``'s MGDA min-norm direction and an RBF kernel ``k`` (median-heuristic
  bandwidth) on the parameters or on the objective values; the kernel-gradient term repels.

:func:`best_hypervolume` is the official ZDT code's metric: the best hypervolume of the ``m``
points over training.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from morl import aggregators
from morl.metrics.most_metrics import hypervolume
from morl.most import losses_and_jacobians
from morl.solvers.gramian import normalized_gramian

Objectives = Callable[[torch.Tensor], torch.Tensor]
Callback = Callable[[int, torch.Tensor], None]


def simplex_weights(num_models: int, num_objectives: int = 2, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Weights ``[m, 2]`` ``(t_j, 1 − t_j)`` with ``t_j = (j + 1)/(m + 1)`` (two objectives only).

    The endpoints are left out: a zero weight leaves the other objective's variables unconstrained.
    """
    if num_objectives != 2:
        raise ValueError(f"simplex_weights spreads weights for 2 objectives only, got {num_objectives}; pass weights")
    if num_models < 1:
        raise ValueError(f"num_models must be >= 1, got {num_models}")
    t = torch.arange(1, num_models + 1, dtype=dtype) / (num_models + 1)
    return torch.stack([t, 1 - t], dim=-1)


def circle_preferences(num_models: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """EPO preferences ``[m, 2]`` ``(cos φ_j, sin φ_j)``, φ evenly in [1e-4·π/2, (1 − 1e-4)·π/2] (official code)."""
    if num_models < 1:
        raise ValueError(f"num_models must be >= 1, got {num_models}")
    lo, hi = 1e-4 * math.pi / 2, (1 - 1e-4) * math.pi / 2
    phi = (
        torch.linspace(lo, hi, num_models, dtype=dtype) if num_models > 1 else torch.tensor([math.pi / 4], dtype=dtype)
    )
    return torch.stack([phi.cos(), phi.sin()], dim=-1)


def _descend(thetas: torch.Tensor, d: torch.Tensor, lr: float, step: str, project) -> torch.Tensor:
    thetas = thetas - lr * (torch.sign(d) if step == "sign" else d)
    return thetas if project is None else project(thetas)


def _check_step(step: str) -> None:
    if step not in ("gd", "sign"):
        raise ValueError(f"step={step!r} is not valid; allowed: gd, sign")


def linearisation(
    objectives: Objectives,
    thetas: torch.Tensor,
    lr: float,
    steps: int,
    weights: torch.Tensor | None = None,
    project: Callable | None = None,
    callback: Callback | None = None,
    step: str = "gd",
) -> torch.Tensor:
    """Model ``j`` descends ``Σ_i W_ji L_i``; ``weights [m, n]`` default :func:`simplex_weights`."""
    _check_step(step)
    thetas = thetas.detach().clone()
    m = thetas.shape[0]
    w = simplex_weights(m, dtype=thetas.dtype) if weights is None else weights.to(thetas)
    if w.dim() != 2 or w.shape[0] != m:
        raise ValueError(f"weights must have shape [m={m}, n], got {tuple(w.shape)}")
    for t in range(steps):
        _, jac = losses_and_jacobians(objectives, thetas)
        thetas = _descend(thetas, torch.einsum("ji,jid->jd", w, jac), lr, step, project)
        if callback is not None:
            callback(t, thetas)
    return thetas


def run_aggregators(
    objectives: Objectives,
    thetas: torch.Tensor,
    aggs: Sequence[aggregators.Aggregator],
    lr: float,
    steps: int,
    project: Callable | None = None,
    callback: Callback | None = None,
    step: str = "gd",
) -> torch.Tensor:
    """Model ``j`` follows ``aggs[j](∇L(θ_j), L(θ_j))`` for ``steps`` steps (independent runs)."""
    _check_step(step)
    thetas = thetas.detach().clone()
    if len(aggs) != thetas.shape[0]:
        raise ValueError(f"need one aggregator per model: {thetas.shape[0]} models, {len(aggs)} aggregators")
    for t in range(steps):
        losses, jac = losses_and_jacobians(objectives, thetas)
        d = torch.stack([agg(jac[j], losses[j]) for j, agg in enumerate(aggs)])
        thetas = _descend(thetas, d, lr, step, project)
        if callback is not None:
            callback(t, thetas)
    return thetas


def mgda(
    objectives: Objectives,
    thetas: torch.Tensor,
    lr: float,
    steps: int,
    project: Callable | None = None,
    callback: Callback | None = None,
    step: str = "gd",
    **options,
) -> torch.Tensor:
    """``m`` independent MGDA runs from the rows of ``thetas``; ``options`` go to the aggregator."""
    aggs = [aggregators.build("mgda", **options) for _ in range(thetas.shape[0])]
    return run_aggregators(objectives, thetas, aggs, lr, steps, project, callback, step)


def epo(
    objectives: Objectives,
    thetas: torch.Tensor,
    lr: float,
    steps: int,
    preferences: torch.Tensor | None = None,
    project: Callable | None = None,
    callback: Callback | None = None,
    step: str = "gd",
    **options,
) -> torch.Tensor:
    """``m`` EPO-AL runs, model ``j`` with preference ``preferences[j]`` (default :func:`circle_preferences`)."""
    m = thetas.shape[0]
    prefs = circle_preferences(m) if preferences is None else preferences
    if prefs.dim() != 2 or prefs.shape[0] != m:
        raise ValueError(f"preferences must have shape [m={m}, n], got {tuple(prefs.shape)}")
    aggs = [aggregators.build("epo_al", preference=r, **options) for r in prefs]
    return run_aggregators(objectives, thetas, aggs, lr, steps, project, callback, step)


#: Where the MOO-SVGD kernel measures distance: the objective values L(θ) (the official ZDT
#: script's kernel, the default) or the parameters θ (plain SVGD).
KERNEL_SPACES = ("objectives", "params")


def median_bandwidth(sq_dists: torch.Tensor) -> torch.Tensor:
    """SVGD's median heuristic ``h = median(‖p_i − p_j‖²) / log m`` over all ``m × m`` pairs (0-d).

    The median includes the zero diagonal, as in the SVGD and MOO-SVGD code (numpy median of the
    full square matrix). ``h = 1`` where it would be 0 (all particles equal, or ``m = 1``): the kernel
    gradient is then 0 for any ``h``.
    """
    m = sq_dists.shape[-1]
    med = torch.quantile(sq_dists.reshape(-1), 0.5)
    h = med / math.log(m) if m > 1 else torch.ones_like(med)
    return torch.where(h > torch.finfo(h.dtype).tiny, h, torch.ones_like(h))


def rbf_kernel(points: torch.Tensor, bandwidth: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(K [m, m], R [m, P])`` of ``k(p_i, p_j) = exp(−‖p_i − p_j‖² / h)`` for ``points [m, P]``.

    ``R_i = Σ_j ∇_{p_i} k(p_i, p_j) = −(2/h) Σ_j k_ij (p_i − p_j)`` with ``h`` held fixed (the
    median heuristic :func:`median_bandwidth` when ``bandwidth`` is None): descending ``R_i``
    moves ``p_i`` away from its neighbours.
    """
    diff = points.unsqueeze(1) - points.unsqueeze(0)  # [m, m, P]: p_i − p_j
    sq = diff.pow(2).sum(-1)
    h = (
        median_bandwidth(sq)
        if bandwidth is None
        else torch.as_tensor(bandwidth, dtype=points.dtype, device=points.device)
    )
    k = torch.exp(-sq / h)
    return k, (-2.0 / h) * torch.einsum("ij,ijp->ip", k, diff)


def mgda_directions(jac: torch.Tensor, agg: aggregators.Aggregator) -> torch.Tensor:
    """MGDA directions ``[m, D]`` of ``m`` particles from their Jacobians ``[m, n, D]``, batched.

    The same computation as ``agg(jac[j])`` for each ``j`` (the aggregators' normalised
    Gramian), in one batched solve: the min-norm solvers take Gramians ``[..., n, n]``.
    """
    gram, _ = normalized_gramian(jac)
    w = agg.weights_from_gramian(gram).to(jac.dtype)  # [m, n]
    return torch.einsum("jn,jnd->jd", w, jac)


def _check_svgd(thetas, bandwidth, repulsion, kernel, agg) -> None:
    if not isinstance(thetas, torch.Tensor) or thetas.dim() != 2 or not thetas.is_floating_point():
        what = tuple(thetas.shape) if isinstance(thetas, torch.Tensor) else type(thetas).__name__
        raise ValueError(f"svgd: thetas must be a floating-point tensor [m, D], got {what}")
    if bandwidth is not None and not (
        isinstance(bandwidth, (int, float)) and math.isfinite(bandwidth) and bandwidth > 0
    ):
        raise ValueError(f"svgd: bandwidth must be None (median heuristic) or a finite float > 0, got {bandwidth!r}")
    if not (isinstance(repulsion, (int, float)) and math.isfinite(repulsion) and repulsion >= 0):
        raise ValueError(f"svgd: repulsion must be a finite float >= 0, got {repulsion!r}")
    if kernel not in KERNEL_SPACES:
        raise ValueError(f"svgd: kernel={kernel!r} is not valid; allowed: {', '.join(KERNEL_SPACES)}")
    if getattr(agg, "warm_start", False):
        raise ValueError("svgd: warm_start=True is not supported (the m min-norm problems are solved in one batch)")


def _check_losses(losses: torch.Tensor, jac: torch.Tensor, mode: str) -> torch.Tensor | None:
    """Per ``check_finite``: raise on NaN/inf (one host sync), or return the all-finite flag for "skip"."""
    if losses.dim() != 2:
        raise ValueError(
            f"svgd: objectives must map θ [D] to a loss vector [n], got losses of shape {tuple(losses.shape[1:])}"
        )
    if mode == "off":
        return None
    ok = torch.isfinite(losses).all(1) & torch.isfinite(jac.flatten(1).amax(1)) & torch.isfinite(jac.flatten(1).amin(1))
    if mode == "skip":
        return ok.all()
    if not bool(ok.all()):
        raise ValueError(f"svgd: particle {int((~ok).nonzero()[0, 0])} has a non-finite (NaN/inf) loss or gradient")
    return None


def svgd_direction(
    losses: torch.Tensor,
    jac: torch.Tensor,
    thetas: torch.Tensor,
    agg: aggregators.Aggregator,
    bandwidth: float | None = None,
    repulsion: float = 1.0,
    kernel: str = "objectives",
) -> torch.Tensor:
    """The MOO-SVGD update ``v [m, D]`` to descend, from ``losses [m, n]`` and ``jac [m, n, D]`` at ``thetas``.

    ``v_i = (1/m) Σ_j [k_ij d_j + α ∇_{θ_i} k(θ_i, θ_j)]``. For the θ kernel this is SVGD's
    ``−φ(θ_i) = (1/m) Σ_j [k_ji d_j − α ∇_{θ_j} k(θ_j, θ_i)]`` with ``∇ log p = −d``. For
    ``kernel="objectives"`` the kernel is on ``L(θ)`` and ``∇_{θ_i} k = J_iᵀ ∇_{L_i} k`` (chain rule
    through the Jacobian already at hand); differentiating at the particle's own ``θ_i`` is what the
    official ZDT code does (``−½ ∇ Σ_ij k_ij``).
    """
    d = mgda_directions(jac, agg)
    if kernel == "params":
        k, rep = rbf_kernel(thetas, bandwidth)
    else:
        k, rep_f = rbf_kernel(losses, bandwidth)
        rep = torch.einsum("jn,jnd->jd", rep_f, jac)
    return (k @ d + repulsion * rep) / thetas.shape[0]


def svgd(
    objectives: Objectives,
    thetas: torch.Tensor,
    lr: float,
    steps: int,
    project: Callable | None = None,
    callback: Callback | None = None,
    step: str = "gd",
    bandwidth: float | None = None,
    repulsion: float = 1.0,
    kernel: str = "objectives",
    **mgda_options,
) -> torch.Tensor:
    """MOO-SVGD: ``θ_i ← θ_i − lr · v_i`` (see :func:`svgd_direction`) for ``steps`` steps.

    ``bandwidth`` h of ``k = exp(−‖·‖²/h)``: None for the median heuristic (recomputed every step),
    or a fixed float > 0. ``repulsion`` α ≥ 0 scales the kernel-gradient term. ``kernel`` picks the
    space the kernel measures distance in (:data:`KERNEL_SPACES`). ``mgda_options`` go to
    ``aggregators.build("mgda")`` (``max_iter``, ``tol``, ``check_finite``; not ``warm_start``).
    With ``check_finite="skip"`` a step with any non-finite loss or gradient moves no particle.
    """
    _check_step(step)
    agg = aggregators.build("mgda", **mgda_options)
    _check_svgd(thetas, bandwidth, repulsion, kernel, agg)
    thetas = thetas.detach().clone()
    for t in range(steps):
        losses, jac = losses_and_jacobians(objectives, thetas)
        ok = _check_losses(losses, jac, agg.check_finite)
        v = svgd_direction(losses, jac, thetas, agg, bandwidth, repulsion, kernel)
        if ok is not None:
            v = torch.where(ok & torch.isfinite(v).all(), v, torch.zeros((), dtype=v.dtype, device=v.device))
        thetas = _descend(thetas, v, lr, step, project)
        if callback is not None:
            callback(t, thetas)
    return thetas


def best_hypervolume(
    method: Callable[..., torch.Tensor],
    objectives: Objectives,
    thetas: torch.Tensor,
    reference: Sequence[float],
    **kwargs,
) -> tuple[float, torch.Tensor]:
    """``(best HV over training, final thetas)`` for a baseline above (the official ZDT metric)."""
    best = [0.0]

    def track(t: int, th: torch.Tensor) -> None:
        best[0] = max(best[0], float(hypervolume(objectives_batched(objectives, th), reference)))

    final = method(objectives, thetas, callback=track, **kwargs)
    return best[0], final


def objectives_batched(objectives: Objectives, thetas: torch.Tensor) -> torch.Tensor:
    """Losses ``[m, n]`` of ``objectives`` at every row of ``thetas``."""
    return torch.func.vmap(objectives)(thetas.detach())


__all__ = [
    "simplex_weights",
    "circle_preferences",
    "linearisation",
    "run_aggregators",
    "mgda",
    "epo",
    "KERNEL_SPACES",
    "median_bandwidth",
    "rbf_kernel",
    "mgda_directions",
    "svgd_direction",
    "svgd",
    "best_hypervolume",
    "objectives_batched",
]
