"""MGDA (Désidéri 2012): the min-norm element of the convex hull of the gradients.

    λ* = argmin_{λ∈Δ_K} ‖Σ_k λ_k g_k‖²,   d = Σ_k λ*_k g_k.

−d decreases every objective unless the point is Pareto stationary (then d = 0), and
g_k·d ≥ ‖d‖² for every k (Lemma 6 of the MoCo paper).
"""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators.base import GramianAggregator
from morl.solvers.min_norm import min_norm


class MGDA(GramianAggregator):
    """Min-norm multiple-gradient descent, solved on the K×K Gramian.

    Options: ``max_iter`` (100) and ``tol`` (1e-8, Frank–Wolfe gap of the problem on G/max diag)
    bound the iterative solver used for K > 2; K = 2 is closed form, K = 1 returns the gradient.
    ``warm_start`` (False) starts each K > 2 solve from the previous weights (same K); they are
    then state (``w_prev``). The weights do not depend on a global scale of the gradients and
    the direction scales with it linearly.
    """

    _state_keys = ("w_prev",)

    def __init__(self, max_iter: int = 100, tol: float = 1e-8, warm_start: bool = False, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        name = type(self).__name__
        check_number(name, "max_iter", max_iter, low=1, integer=True)
        check_number(name, "tol", tol)
        check_choice(name, "warm_start", warm_start, (True, False))
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = bool(warm_start)
        self.w_prev: torch.Tensor | None = None

    def reset(self) -> None:
        super().reset()
        self.w_prev = None

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        init = self.w_prev if self.warm_start and self.w_prev is not None and self.w_prev.shape == gram.shape[-1:] else None
        w = min_norm(gram, max_iter=self.max_iter, tol=self.tol, init=init)
        if self.warm_start:
            self.w_prev = w.detach()
        return w

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_iter={self.max_iter}, tol={self.tol:g})"
