"""ExcessMTL (He et al., "Robust Multi-Task Learning with Excess Risks", ICML 2024, arXiv 2402.02009):
exponentiated-gradient weights towards the tasks of largest excess risk,

    Ê_k = Σ_c g_kc² / sqrt(S_kc + 1e-7),   α ← softmax(log α + η Ê / (Ê⁰ + 1e-7)),   α⁰ = 1/K,

S the running sum of g ⊙ g, Ê⁰ the first call's Ê (or the mean over ``warmup`` calls); without
warm-up the first step uses the unscaled Ê, as the authors' code.
"""

import torch

from morl.aggregators._checks import check_number
from morl.aggregators._counters import CallCounters
from morl.aggregators.base import Aggregator

#: the authors' constant under the square root and in the baseline's denominator
EPS = 1e-7


class ExcessMTL(CallCounters, Aggregator):
    """Excess-risk weighting; the weights sum to 1 (the authors' sum to K).

    Options: ``robust_step_size`` η (1.0), ``warmup`` (0 calls, weights 1/K meanwhile).
    State: ``sq_sum`` [K, D] (S + 1e-7), ``alpha``, ``baseline`` (0 = unset), ``warmup_sum``, ``calls``.
    """

    _COUNTED = {"calls": "calls"}  # extra-state key -> counter (CallCounters)
    _STATE = ("sq_sum", "alpha", "baseline", "warmup_sum")
    _UNIFORM = ("alpha",)
    _REPR = ("robust_step_size", "warmup")

    def __init__(self, robust_step_size: float = 1.0, warmup: int = 0, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self.robust_step_size = check_number("ExcessMTL", "robust_step_size", robust_step_size, strict=True)
        self.warmup = check_number("ExcessMTL", "warmup", warmup, integer=True)
        self.calls = 0

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        g = grads.detach()
        sq_sum, alpha, baseline, warmup_sum = self._state(g)
        sq_sum = torch.addcmul(sq_sum, g, g)  # S + ε, a new tensor (the skip policy keeps the old one)
        scaled = torch.rsqrt(sq_sum).mul_(g)  # g / sqrt(S + ε), the one [K, D] temporary
        excess = torch.linalg.vecdot(scaled, g)  # Ê_k = Σ_c g_kc² / sqrt(S_kc + ε)
        if self.calls < self.warmup:  # collect Ê, keep the weights
            warmup_sum = warmup_sum + excess
        else:
            alpha, baseline = self._step(alpha, baseline, excess, warmup_sum)
        self.calls += 1
        self.sq_sum, self.alpha, self.baseline, self.warmup_sum = sq_sum, alpha, baseline, warmup_sum
        self.weights = alpha
        return alpha @ grads

    def _step(self, alpha, baseline, excess, warmup_sum) -> tuple[torch.Tensor, torch.Tensor]:
        """(α, baseline) after the exponentiated-gradient step; an unset (0) baseline is set here."""
        unset = baseline <= 0
        first = warmup_sum / self.warmup if self.warmup else excess
        new_baseline = torch.where(unset, first, baseline)
        if self.warmup:
            rate = excess / (new_baseline + EPS)
        else:  # the authors' first step: the unscaled excess risk
            rate = torch.where(unset, excess, excess / (baseline + EPS))
        return torch.softmax(torch.log(alpha) + self.robust_step_size * rate, dim=0), new_baseline

    def _state(self, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.sq_sum is None:
            return tuple(self._initial_state(n, g if n == "sq_sum" else g.new_zeros(g.shape[0])) for n in self._STATE)
        if self.sq_sum.shape != g.shape:
            raise ValueError(
                f"ExcessMTL holds statistics for gradients of shape {tuple(self.sq_sum.shape)} but got {tuple(g.shape)}; call reset() to start over"
            )
        return tuple(getattr(self, n) for n in self._STATE)

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        return torch.full_like(like, EPS) if name == "sq_sum" else super()._initial_state(name, like)
