"""MGDA (Désidéri 2012): the min-norm element of the convex hull of the gradients,

λ* = argmin_{λ∈Δ_K} ‖Σ_k λ_k g_k‖²,   d = Σ_k λ*_k g_k   (g_k·d ≥ ‖d‖² ∀k: arXiv 2210.12624, Lemma 6).
"""

import torch

from morl.aggregators._warm_start import WarmStartSolver
from morl.aggregators.base import GramianAggregator
from morl.solvers.min_norm import min_norm_solve


class MGDA(WarmStartSolver, GramianAggregator):
    """Min-norm weights on the Gramian (:mod:`morl.solvers.min_norm`). Options: ``max_iter`` (100) Wolfe
    rounds; ``tol`` (1e-8) on g_k·d ≥ ‖d‖², relative to ‖g_k‖‖d‖; ``warm_start`` (False)."""

    _REPR = ("max_iter", "tol")

    def __init__(
        self, max_iter: int = 100, tol: float = 1e-8, warm_start: bool = False, check_finite: str = "raise"
    ) -> None:
        super().__init__(check_finite=check_finite)
        self._init_solver(type(self).__name__, max_iter, tol, warm_start)

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        w, converged = min_norm_solve(
            gram, max_iter=self.max_iter, tol=self.tol, init=self._start(gram.shape[-1]), eps_2=0.0
        )
        self._count_not_converged(converged)
        self._remember(w)
        return w
