"""The MosT paper's multi-solution baselines for few objectives (ZDT, spec §8.4 and §9).

Each baseline trains ``m`` models independently, model ``j`` following its own descent direction
from its ``n`` per-objective gradients — the same conventions as :func:`morl.most.run`
(``objectives: θ [D] -> [n]``, ``thetas [m, D]``, optional ``project`` and ``step="sign"``):

* :func:`linearisation` — model ``j`` minimises ``Σ_i w_ji L_i`` with fixed weights ``W [m, n]``
  (default :func:`simplex_weights`: evenly spread inside the simplex);
* :func:`mgda` — each model follows the MGDA min-norm direction (``aggregators.build("mgda")``);
* :func:`epo` — each model runs EPO-AL with its own preference vector
  (``aggregators.build("epo_al", preference=r_j)``; default :func:`circle_preferences`).

MOO-SVGD is not implemented. :func:`best_hypervolume` is the official ZDT code's metric: the best
hypervolume of the ``m`` points over training.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from morl import aggregators
from morl.metrics.most_metrics import hypervolume
from morl.most import losses_and_jacobians

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
    phi = torch.linspace(lo, hi, num_models, dtype=dtype) if num_models > 1 else torch.tensor([math.pi / 4], dtype=dtype)
    return torch.stack([phi.cos(), phi.sin()], dim=-1)


def _descend(thetas: torch.Tensor, d: torch.Tensor, lr: float, step: str, project) -> torch.Tensor:
    thetas = thetas - lr * (torch.sign(d) if step == "sign" else d)
    return thetas if project is None else project(thetas)


def _check_step(step: str) -> None:
    if step not in ("gd", "sign"):
        raise ValueError(f"step={step!r} is not valid; allowed: gd, sign")


def linearisation(objectives: Objectives, thetas: torch.Tensor, lr: float, steps: int,
                  weights: torch.Tensor | None = None, project: Callable | None = None,
                  callback: Callback | None = None, step: str = "gd") -> torch.Tensor:
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


def run_aggregators(objectives: Objectives, thetas: torch.Tensor, aggs: Sequence[aggregators.Aggregator], lr: float,
                    steps: int, project: Callable | None = None, callback: Callback | None = None,
                    step: str = "gd") -> torch.Tensor:
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


def mgda(objectives: Objectives, thetas: torch.Tensor, lr: float, steps: int, project: Callable | None = None,
         callback: Callback | None = None, step: str = "gd", **options) -> torch.Tensor:
    """``m`` independent MGDA runs from the rows of ``thetas``; ``options`` go to the aggregator."""
    aggs = [aggregators.build("mgda", **options) for _ in range(thetas.shape[0])]
    return run_aggregators(objectives, thetas, aggs, lr, steps, project, callback, step)


def epo(objectives: Objectives, thetas: torch.Tensor, lr: float, steps: int, preferences: torch.Tensor | None = None,
        project: Callable | None = None, callback: Callback | None = None, step: str = "gd",
        **options) -> torch.Tensor:
    """``m`` EPO-AL runs, model ``j`` with preference ``preferences[j]`` (default :func:`circle_preferences`)."""
    m = thetas.shape[0]
    prefs = circle_preferences(m) if preferences is None else preferences
    if prefs.dim() != 2 or prefs.shape[0] != m:
        raise ValueError(f"preferences must have shape [m={m}, n], got {tuple(prefs.shape)}")
    aggs = [aggregators.build("epo_al", preference=r, **options) for r in prefs]
    return run_aggregators(objectives, thetas, aggs, lr, steps, project, callback, step)


def best_hypervolume(method: Callable[..., torch.Tensor], objectives: Objectives, thetas: torch.Tensor,
                     reference: Sequence[float], **kwargs) -> tuple[float, torch.Tensor]:
    """``(best HV over training, final thetas)`` for a baseline above (the official ZDT metric)."""
    best = [0.0]

    def track(t: int, th: torch.Tensor) -> None:
        best[0] = max(best[0], float(hypervolume(objectives_batched(objectives, th), reference)))

    final = method(objectives, thetas, callback=track, **kwargs)
    return best[0], final


def objectives_batched(objectives: Objectives, thetas: torch.Tensor) -> torch.Tensor:
    """Losses ``[m, n]`` of ``objectives`` at every row of ``thetas``."""
    return torch.func.vmap(objectives)(thetas.detach())


__all__ = ["simplex_weights", "circle_preferences", "linearisation", "run_aggregators", "mgda", "epo",
           "best_hypervolume", "objectives_batched"]
