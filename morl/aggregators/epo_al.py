"""EPO-AL: exact Pareto optimisation by a primal-dual augmented Lagrangian (Park, Vlaski, Hanzo,
"Scalable Min-Max Optimization via Primal-Dual Exact Pareto Optimization", arXiv 2504.02833).

Algorithm 1 of the paper, one call per iteration. With the losses J and gradients G of the
current iterate w_{i-1}:

    c         = L_r J = r * (r*J - mean(r*J))            # O(K), no K x K matrix
    weights   = max(p, 0) + eta * c
    direction = G^T weights                               # (19a) with the optimizer's step
    p        <- p + mu * c                                # (19b), p itself is NOT clipped

so ``w <- w - mu * direction`` (SGD with lr = mu) is exactly Algorithm 1: both updates use
w_{i-1} and the same step mu. The dual state p starts at 1/K and keeps
sum_k p_k / r_k = sum_k 1 / (K r_k) forever (eq. 25-26).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from morl.aggregators._counters import CallCounters
from morl.aggregators.base import Aggregator


class EPOAL(CallCounters, Aggregator):
    """EPO-AL (Algorithm 1): drives r_1 J_1 = ... = r_K J_K on the Pareto front.

    Options:

    * ``preference`` -- r, K positive numbers (a larger r_k pushes J_k lower). Default
      ``None``: uniform r_k = 1/K, fixed at the first call. r is used as given (not
      normalised); its scale enters c quadratically, as in the paper.
    * ``eta`` -- penalty eta > 0 of the augmented Lagrangian (paper's Fig. 1: 10).
    * ``mu`` -- dual step mu > 0. Set the optimizer's learning rate to the same value to run
      the paper's algorithm exactly (paper's Fig. 1: 0.1).

    Losses must be passed (``needs_losses``) and should be positive, as the paper assumes.
    State: the dual variable ``p`` [K] and the call counter ``steps``.
    """

    _COUNTED = {"steps": "steps"}  # extra-state key -> counter (CallCounters)

    needs_losses = True

    def __init__(
        self,
        preference: Sequence[float] | torch.Tensor | None = None,
        eta: float = 10.0,
        mu: float = 0.1,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self.preference = None if preference is None else _validate_preference(preference)
        for name, value in (("eta", eta), ("mu", mu)):
            if not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
                raise ValueError(f"EPOAL option {name}={value!r} is not valid; allowed: a finite number > 0")
        self.eta = float(eta)
        self.mu = float(mu)
        self.register_buffer("p", None)
        self.steps = 0

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        # a skipped first call leaves the multipliers at their start, uniform 1/K
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
        # cached per (device, dtype): converting the host tensor on every call would be a
        # host→device copy per step on CUDA
        key = (like.device, like.dtype)
        if getattr(self, "_preference_on", (None, None))[0] != key:
            self._preference_on = (key, self.preference.to(dtype=like.dtype, device=like.device))
        return self._preference_on[1]

    def __repr__(self) -> str:
        pref = None if self.preference is None else [round(v, 6) for v in self.preference.tolist()]
        return f"EPOAL(preference={pref}, eta={self.eta}, mu={self.mu})"


def fairness_residual(losses: torch.Tensor, preference: torch.Tensor) -> torch.Tensor:
    """c = L_r J = r * (r*J - mean(r*J)), the gradient of the fairness penalty J^T L_r J / 2.

    L_r = diag(r)(I - 11^T/K)diag(r) (eq. 14) is never built; entry k is positive exactly
    when r_k J_k is above the mean, and sum_k c_k / r_k = 0.
    """
    v = preference * losses
    return preference * (v - v.mean())


def _validate_preference(preference) -> torch.Tensor:
    r = torch.as_tensor(preference, dtype=torch.float64).detach().cpu().reshape(-1)
    if r.numel() < 1 or not bool(torch.isfinite(r).all()) or not bool((r > 0).all()):
        raise ValueError(f"EPOAL preference={preference!r} is not valid; allowed: K >= 1 finite numbers, each > 0")
    return r
