"""EPO-AL: exact Pareto optimisation by a primal-dual augmented Lagrangian (Park, Vlaski, Hanzo,
arXiv 2504.02833, Algorithm 1), one iteration per call:

    c = L_r J = r ∘ (r∘J − mean(r∘J)),   weights = max(p, 0) + η c,   d = Gᵀweights   (19a)
    p ← p + μ c                                                                    (19b)

so SGD with lr = μ on d is Algorithm 1 exactly. p starts at 1/K (p itself is not clipped).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from morl.aggregators._counters import CallCounters
from morl.aggregators._preference import on_device
from morl.aggregators.base import Aggregator


class EPOAL(CallCounters, Aggregator):
    """EPO-AL: drives r_1 J_1 = ... = r_K J_K on the Pareto front. Losses are required (positive).

    Options: ``preference`` r (None: r_k = 1/K; K numbers > 0, used as given), ``eta`` (10,
    the penalty) and ``mu`` (0.1, the dual step: set the optimizer's lr to it), the paper's
    Fig. 1 values. State: the dual variable ``p`` [K] and the call counter ``steps``.
    """

    _COUNTED = {"steps": "steps"}  # extra-state key -> counter (CallCounters)

    needs_losses = True

    def __init__(
        self, preference: Sequence[float] | torch.Tensor | None = None, eta: float = 10.0, mu: float = 0.1,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self.preference = None if preference is None else _validate_preference(preference)
        for name, value in (("eta", eta), ("mu", mu)):
            if not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
                raise ValueError(f"EPOAL option {name}={value!r} is not valid; allowed: a finite number > 0")
        self.eta, self.mu = float(eta), float(mu)
        self.register_buffer("p", None)
        self.steps = 0
        self._preference_on: dict = {}

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        return torch.full_like(like, 1.0 / like.shape[0]) if name == "p" else super()._initial_state(name, like)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        k = grads.shape[0]
        r = self._preference(k, grads)
        if self.p is None:
            self.p = torch.full((k,), 1.0 / k, dtype=grads.dtype, device=grads.device)
        elif self.p.shape[0] != k:
            raise ValueError(f"EPOAL was stepped with K={self.p.shape[0]} objectives, now got K={k}; call reset() first")
        p = self.p.to(dtype=grads.dtype, device=grads.device)
        c = fairness_residual(losses, r)
        weights = p.clamp(min=0) + self.eta * c
        self.p = p + self.mu * c
        self.steps += 1
        self.weights = weights.detach()
        return weights @ grads

    def _preference(self, k: int, like: torch.Tensor) -> torch.Tensor:
        if self.preference is None:
            return torch.full((k,), 1.0 / k, dtype=like.dtype, device=like.device)
        if self.preference.shape[0] != k:
            raise ValueError(f"EPOAL preference has {self.preference.shape[0]} entries but got K={k} objectives")
        return on_device(self._preference_on, self.preference, like)

    def __repr__(self) -> str:
        pref = None if self.preference is None else [round(v, 6) for v in self.preference.tolist()]
        return f"EPOAL(preference={pref}, eta={self.eta}, mu={self.mu})"


def fairness_residual(losses: torch.Tensor, preference: torch.Tensor) -> torch.Tensor:
    """c = r ∘ (r∘J − mean(r∘J)), the gradient of J^T L_r J / 2 (eq. 14; L_r is never built)."""
    v = preference * losses
    return preference * (v - v.mean())


def _validate_preference(preference) -> torch.Tensor:
    r = torch.as_tensor(preference, dtype=torch.float64).detach().cpu().reshape(-1)
    if r.numel() < 1 or not bool(torch.isfinite(r).all()) or not bool((r > 0).all()):
        raise ValueError(f"EPOAL preference={preference!r} is not valid; allowed: K >= 1 finite numbers, each > 0")
    return r
