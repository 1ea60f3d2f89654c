"""MGDA (Désidéri 2012): the min-norm element of the convex hull of the gradients.

    λ* = argmin_{λ∈Δ_K} ‖Σ_k λ_k g_k‖²,   d = Σ_k λ*_k g_k.

−d decreases every objective unless the point is Pareto stationary (then d = 0), and
g_k·d ≥ ‖d‖² for every k (Lemma 6 of the MoCo paper, arXiv 2210.12624).
"""

from __future__ import annotations

import torch

from morl.aggregators._warm_start import WarmStartSolver
from morl.aggregators.base import GramianAggregator
from morl.solvers.min_norm import min_norm_solve


class MGDA(WarmStartSolver, GramianAggregator):
    """Min-norm multiple-gradient descent, solved on the K×K Gramian (:mod:`morl.solvers.min_norm`:
    closed form at K = 2, Wolfe's exact active-set method above).

    Options: ``tol`` (1e-8: no row may violate the optimality condition g_k·d ≥ ‖d‖² by more
    than tol·‖g_k‖‖d‖); ``max_iter`` (100) bounds Wolfe's rounds, and solves stopped by it count
    in ``not_converged``; ``warm_start`` (False) starts each solve from the previous weights
    (same K), which are then state (``w_prev``). The weights do not depend on a global scale of
    the gradients and the direction scales with it linearly.
    """

    def __init__(self, max_iter: int = 100, tol: float = 1e-8, warm_start: bool = False, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self._init_solver(type(self).__name__, max_iter, tol, warm_start)

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        w, converged = min_norm_solve(gram, max_iter=self.max_iter, tol=self.tol, init=self._start(gram.shape[-1]), eps_2=0.0)
        self._count_not_converged(converged)
        self._remember(w)
        return w

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_iter={self.max_iter}, tol={self.tol:g})"
