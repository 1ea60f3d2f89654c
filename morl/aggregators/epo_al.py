"""EPO-AL: exact Pareto optimisation by a primal-dual augmented Lagrangian (Park, Vlaski, Hanzo,
arXiv 2504.02833, Algorithm 1), one iteration per call:

    c = L_r J = r ∘ (r∘J − mean(r∘J)),   weights = max(p, 0) + η c,   d = Gᵀweights   (19a)
    p ← p + μ c                                                                    (19b)

so SGD with lr = μ on d is Algorithm 1 exactly. p starts at 1/K (p itself is not clipped).
The weights depend on the losses only: a loss weighting, learners backpropagate ``weighted_loss``
once instead of building the [K, D] rows.
"""

from collections.abc import Sequence

import torch

from morl.aggregators._checks import check_number
from morl.aggregators._counters import CallCounters
from morl.aggregators._preference import PreferenceVector
from morl.aggregators.loss_weighting import LossWeighting


class EPOAL(CallCounters, PreferenceVector, LossWeighting):
    """EPO-AL: drives r_1 J_1 = ... = r_K J_K on the Pareto front. Losses are required (positive).

    Options: ``preference`` r (None: r_k = 1/K; K numbers > 0, used as given), ``eta`` (10,
    the penalty) and ``mu`` (0.1, the dual step: set the optimizer's lr to it), the paper's
    Fig. 1 values. State: the dual variable ``p`` [K] and the call counter ``steps``.
    """

    _COUNTED = {"steps": "steps"}  # extra-state key -> counter (CallCounters)
    _PREF = "preference"
    _STATE = _UNIFORM = ("p",)
    _REPR = ("preference", "eta", "mu")

    def __init__(
        self,
        preference: Sequence[float] | torch.Tensor | None = None,
        eta: float = 10.0,
        mu: float = 0.1,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self._init_preference(preference, strict=True)
        self.eta = check_number("EPOAL", "eta", eta, strict=True)
        self.mu = check_number("EPOAL", "mu", mu, strict=True)
        self.steps = 0

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        r = self._preference(losses.shape[0], losses)
        p = self._get("p", r)
        c = fairness_residual(losses, r)
        self.p = p + self.mu * c
        self.steps += 1
        return p.clamp(min=0) + self.eta * c


def fairness_residual(losses: torch.Tensor, preference: torch.Tensor) -> torch.Tensor:
    """c = r ∘ (r∘J − mean(r∘J)), the gradient of J^T L_r J / 2 (eq. 14; L_r is never built)."""
    v = preference * losses
    return preference * (v - v.mean())
