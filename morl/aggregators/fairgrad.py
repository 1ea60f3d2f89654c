"""FairGrad (Ban & Ji, "Fair Resource Allocation in Multi-Task Learning", ICML 2024, arXiv 2402.15638).

d = Σ_k w_k g_k maximises the α-fair utility Σ_k (g_k·d)^(1−α)/(1−α) over a ball: w > 0 solves
G w = w^(−1/α) (eq. 4), so g_k·d = w_k^(−1/α) > 0 (α = 1: Nash-MTL; α = 0: uniform weights).
Solved by Newton's method (:mod:`morl.solvers.alpha_fair`); as the authors' code, d is
multiplied by K and clipped to ``max_norm``.
"""

import torch

from morl.aggregators._checks import check_number
from morl.aggregators.base import GramianAggregator
from morl.aggregators.nash_mtl import clip_weights
from morl.solvers.alpha_fair import alpha_fair_solve


class FairGrad(GramianAggregator):
    """α-fair weights; d = 0 at a Pareto-stationary input. Options: ``alpha`` (1.0), ``max_norm``
    (1.0; 0 disables clipping), ``max_iter`` (50 Newton steps), ``tol`` (1e-8)."""

    gramian_in_units = True  # w scales as ‖g‖^(−2α/(α+1)): the Gramian in the gradients' units
    _REPR = ("alpha", "max_norm")

    def __init__(
        self,
        alpha: float = 1.0,
        max_norm: float = 1.0,
        max_iter: int = 50,
        tol: float = 1e-8,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self.alpha = check_number("FairGrad", "alpha", alpha)
        self.max_norm = check_number("FairGrad", "max_norm", max_norm)
        self.max_iter = check_number("FairGrad", "max_iter", max_iter, low=1, integer=True)
        self.tol = check_number("FairGrad", "tol", tol, strict=True)

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        k = gram.shape[-1]
        if self.alpha == 0.0:
            w = torch.full(gram.shape[:-1], 1.0 / k, dtype=torch.float64, device=gram.device)
        else:
            w, converged, stationary = alpha_fair_solve(gram, self.alpha, self.max_iter, self.tol)
            self._count_not_converged(converged)
            w = torch.where(stationary.unsqueeze(-1), 0.0, w)
        return clip_weights(gram, k * w, self.max_norm).to(gram.dtype)
