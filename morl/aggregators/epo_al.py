"""EPO-AL: exact Pareto optimisation by a primal-dual augmented Lagrangian (Park, Vlaski, Hanzo,
arXiv 2504.02833, Algorithm 1), one iteration per call:

    c = L_r J = r ∘ (r∘J − mean(r∘J)),   weights = max(p, 0) + η c,   d = Gᵀweights   (19a)
    p ← p + μ c                                                                    (19b)

so SGD with lr = μ on d is Algorithm 1 exactly; p is not clipped. The weights read the losses
only: a loss weighting (learners backpropagate ``weighted_loss`` once, no [K, D] rows).
"""

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators._counters import CallCounters
from morl.aggregators._preference import PreferenceVector
from morl.aggregators.loss_weighting import LossWeighting


class EPOAL(CallCounters, PreferenceVector, LossWeighting):
    """EPO-AL: drives r_1 J_1 = ... = r_K J_K on the Pareto front. Losses are required (positive).

    Options: ``preference`` r (None: 1/K; K numbers > 0, used as given), ``eta`` (10, the penalty)
    and ``mu`` (0.1, the dual step = the optimizer's lr), the paper's Fig. 1 values; ``dual_init``:
    p starts at 1/K ("uniform", the paper's) or r / Σ r ("preference": the first step scalarises
    by r). State: the dual variable ``p`` [K] and the call counter ``steps``.
    """

    _COUNTED = {"steps": "steps"}  # extra-state key -> counter (CallCounters)
    _PREF = "preference"
    _STATE = _UNIFORM = ("p",)
    _REPR = ("preference", "eta", "mu", "dual_init")

    def __init__(
        self,
        preference: list[float] | tuple[float, ...] | torch.Tensor | None = None,
        eta: float = 10.0,
        mu: float = 0.1,
        dual_init: str = "uniform",
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self._init_preference(preference, strict=True)
        self.eta = check_number("EPOAL", "eta", eta, strict=True)
        self.mu = check_number("EPOAL", "mu", mu, strict=True)
        check_choice("EPOAL", "dual_init", dual_init, ("uniform", "preference"))
        self.dual_init = dual_init
        self.steps = 0

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:  # name: "p", the only state
        r = self._preference(like.shape[-1], like)
        return r / r.sum() if self.dual_init == "preference" else super()._initial_state(name, like)

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
