"""FairGrad (Ban & Ji, "Fair Resource Allocation in Multi-Task Learning", ICML 2024, arXiv 2402.15638).

The update maximises the α-fair utility Σ_k (g_k·d)^(1−α)/(1−α) of the tasks' first-order
improvements over a ball; its solution is d = Σ_k w_k g_k with w > 0 solving (eq. (4))

    G w = w^(−1/α)      (elementwise; G = J Jᵀ),

so g_k·d = w_k^(−1/α) > 0. α = 1 is Nash-MTL's condition (proportional fairness), α → ∞
approaches max-min fairness, α = 0 is linear scalarisation (uniform weights, as TorchJD).
The authors solve it with scipy ``least_squares`` from w = 1/K; here Newton's method on the
condition's convex potential (:mod:`morl.solvers.alpha_fair`). Their code then multiplies
d by K ("to match the sum loss") and clips ‖d‖ to ``max_norm`` = 1.
"""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_number
from morl.aggregators.base import GramianAggregator
from morl.aggregators.nash_mtl import clip_weights
from morl.solvers.alpha_fair import alpha_fair_solve


class FairGrad(GramianAggregator):
    """α-fair weights, solved on the K×K Gramian in the gradients' units.

    Options: ``alpha`` (1.0, the authors' class default; their runs use e.g. 2.0 on QM9),
    ``max_norm`` (1.0; clip ‖d‖ after the factor K, 0 disables), ``max_iter`` (50 Newton
    steps) and ``tol`` (1e-8, relative violation of w_k^(1/α)(Gw)_k = 1). d = K Σ_k w_k g_k,
    clipped. At a Pareto-stationary input (up to rounding) no α-fair solution exists and d = 0.
    Unconverged solves count in ``not_converged``. Stateless.
    """

    gramian_in_units = True  # w scales as ‖g‖^(−2α/(α+1)): the Gramian in the gradients' units

    def __init__(
        self, alpha: float = 1.0, max_norm: float = 1.0, max_iter: int = 50, tol: float = 1e-8, check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        check_number("FairGrad", "alpha", alpha)
        check_number("FairGrad", "max_norm", max_norm)
        check_number("FairGrad", "max_iter", max_iter, low=1, integer=True)
        check_number("FairGrad", "tol", tol, strict=True)
        self.alpha = float(alpha)
        self.max_norm = float(max_norm)
        self.max_iter = max_iter
        self.tol = float(tol)

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        """K·w (clipped) for ``gram`` = J Jᵀ in the gradients' units."""
        k = gram.shape[-1]
        if self.alpha == 0.0:
            w = torch.full(gram.shape[:-1], 1.0 / k, dtype=torch.float64, device=gram.device)
        else:
            w, converged, stationary = alpha_fair_solve(gram, self.alpha, self.max_iter, self.tol)
            self._count_not_converged(converged)
            w = torch.where(stationary.unsqueeze(-1), torch.zeros_like(w), w)
        return clip_weights(gram, k * w, self.max_norm).to(gram.dtype)

    def __repr__(self) -> str:
        return f"FairGrad(alpha={self.alpha:g}, max_norm={self.max_norm:g})"
