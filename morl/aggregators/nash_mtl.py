"""Nash-MTL (Navon et al., "Multi-Task Learning as a Bargaining Game", ICML 2022, arXiv 2202.01017):
the Nash bargaining solution (Sec. 3) d = Σ_k α_k g_k, α > 0 solving G α = 1/α elementwise, by
Newton's method (:mod:`morl.solvers.alpha_fair`). As the authors' code, ‖d‖ is clipped to
``max_norm`` and α reused for ``update_weights_every`` calls and warm-started.
"""

import torch

from morl.aggregators._checks import check_number
from morl.aggregators._counters import CallCounters
from morl.aggregators.base import GramianAggregator
from morl.solvers.alpha_fair import alpha_fair_solve


def clip_weights(gram: torch.Tensor, w: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``w`` scaled so that ‖Σ w_k g_k‖ = sqrt(wᵀGw) ≤ ``max_norm`` (0: no clipping)."""
    if max_norm <= 0:
        return w
    g = gram.to(torch.float64)
    norm = torch.sqrt((w * (g @ w.unsqueeze(-1)).squeeze(-1)).sum(-1, keepdim=True).clamp_min(0.0))
    return w * torch.clamp(max_norm / norm.clamp_min(torch.finfo(torch.float64).tiny), max=1.0)


class NashMTL(CallCounters, GramianAggregator):
    """Nash-MTL; d = 0 at a Pareto-stationary input. Options: ``max_norm`` (1.0; 0: no clipping),
    ``update_weights_every`` (1), ``max_iter`` (50 Newton steps), ``tol`` (1e-8, relative).
    State: ``alpha`` (the last α, unclipped)."""

    _COUNTED = {"step": "_step"}  # extra-state key -> counter (CallCounters)
    _STATE = ("alpha",)
    gramian_in_units = True  # α ~ 1/‖g‖: the Gramian in the gradients' units
    _REPR = ("max_norm", "update_weights_every")

    def __init__(
        self,
        max_norm: float = 1.0,
        update_weights_every: int = 1,
        max_iter: int = 50,
        tol: float = 1e-8,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self.max_norm = check_number("NashMTL", "max_norm", max_norm)
        self.update_weights_every = check_number(
            "NashMTL", "update_weights_every", update_weights_every, low=1, integer=True
        )
        self.max_iter = check_number("NashMTL", "max_iter", max_iter, low=1, integer=True)
        self.tol = check_number("NashMTL", "tol", tol, strict=True)
        self._step = 0

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        k = gram.shape[-1]
        prev = self.alpha if self.alpha is not None and self.alpha.shape == (k,) else None
        if prev is not None and self._step % self.update_weights_every != 0:
            alpha = prev.to(torch.float64)
        else:
            alpha, converged, stationary = alpha_fair_solve(gram, 1.0, self.max_iter, self.tol, init=prev)
            self._count_not_converged(converged)
            alpha = torch.where(stationary.unsqueeze(-1), 0.0, alpha)
            self.alpha = alpha.to(gram.dtype)
        self._step += 1
        return clip_weights(gram, alpha, self.max_norm).to(gram.dtype)
