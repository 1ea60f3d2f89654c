"""GradDrop (Chen et al., NeurIPS 2020, arXiv 2010.06808, Algorithm 1): gradient sign dropout.

Per coordinate c, the positive sign purity P_c = ½(1 + Σ_k g_kc / Σ_k |g_kc|) ∈ [0, 1]; one
uniform U_c is drawn; task k keeps g_kc when (P_c > U_c and g_kc > 0) or (P_c < U_c and g_kc < 0):
M_kc = 1, else M_kc = 0. With the leak ℓ_k ∈ [0, 1] of each task,

    d_c = Σ_k (ℓ_k + (1 − ℓ_k) M_kc) g_kc          (then ÷ K with reduction="mean")

Since P_c = s⁺_c / (s⁺_c − s⁻_c) with s± the sums of the positive / negative entries,
E_U[d_c] = P s⁺ + (1 − P) s⁻ = Σ_k g_kc: unbiased for the sum. Not a Gramian method: it works
per coordinate, in O(KD) with one [K, D] temporary (the positive, then the negative parts).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from morl.aggregators._checks import check_choice
from morl.aggregators._seeded import SeededDraws
from morl.aggregators.base import Aggregator

REDUCTIONS = ("mean", "sum")


class GradDrop(SeededDraws, Aggregator):
    """Gradient sign dropout on the [K, D] gradients (as TorchJD; the paper applies it to the
    gradients at one layer's activations).

    Options: ``leak`` (0.0: a number for every task or K numbers in [0, 1]; 1 keeps everything,
    the sum), ``seed`` (0: the uniform draws, one per coordinate and call, in the gradients'
    dtype, as TorchJD draws them from the global generator), ``reduction`` "mean" (default) or
    "sum" (the paper, TorchJD). ``weights`` are a summary, not the direction's coefficients:
    the share of each task's L1 mass that reaches d (× 1/K for "mean").
    """

    #: d is not ``weights @ grads`` (the masks are per coordinate): no CR-MOGM around it
    direction_is_weighted = False

    def __init__(
        self, leak: float | Sequence[float] = 0.0, seed: int = 0, reduction: str = "mean", check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self._init_seed("GradDrop", seed)
        check_choice("GradDrop", "reduction", reduction, REDUCTIONS)
        self.leak = _validate_leak(leak)
        self.reduction = reduction

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        k = grads.shape[0]
        leak = self._leak_on(k, grads)
        total = grads.sum(0)
        mass = torch.linalg.vector_norm(grads, ord=1, dim=0)  # Σ_k |g_kc| without a |G| copy
        purity = 0.5 * (1.0 + total / torch.where(mass > 0, mass, 1.0))
        u = torch.rand(grads.shape[1], generator=self._generator_for(grads.device), dtype=grads.dtype, device=grads.device)
        keep_pos, keep_neg = (purity > u).to(grads.dtype), (purity < u).to(grads.dtype)
        direction, kept, l1 = self._masked_part(grads.clamp(min=0.0), keep_pos, leak)
        neg_direction, neg_kept, neg_l1 = self._masked_part(grads.clamp(max=0.0), keep_neg, leak)
        direction = direction + neg_direction
        if leak is not None:
            direction = direction + leak @ grads
        share = (kept - neg_kept) / torch.where(l1 - neg_l1 > 0, l1 - neg_l1, 1.0)  # kept L1 / L1 per task
        scale = 1.0 / k if self.reduction == "mean" else 1.0
        weights = share if leak is None else leak + (1.0 - leak) * share
        self.weights = scale * weights
        return scale * direction

    @staticmethod
    def _masked_part(part: torch.Tensor, keep: torch.Tensor, leak: torch.Tensor | None):
        """(Σ_k (1 − ℓ_k) part_k ∘ keep, per-task kept sum, per-task sum) of one sign's part."""
        summed = part.sum(0) if leak is None else (1.0 - leak) @ part
        return keep * summed, part @ keep, part.sum(1)

    def _leak_on(self, k: int, like: torch.Tensor) -> torch.Tensor | None:
        """The leaks as [K] on ``like``'s device (cached per device/dtype); None when all 0."""
        if len(self.leak) not in (1, k):
            raise ValueError(f"GradDrop option leak has {len(self.leak)} values; allowed: 1 or K={k}")
        if not any(self.leak):
            return None
        key = (like.device, like.dtype, k)
        if getattr(self, "_leak_cache", (None, None))[0] != key:
            values = self.leak * k if len(self.leak) == 1 else self.leak
            self._leak_cache = (key, torch.tensor(values, dtype=like.dtype, device=like.device))
        return self._leak_cache[1]

    def __repr__(self) -> str:
        leak = self.leak[0] if len(self.leak) == 1 else list(self.leak)
        return f"GradDrop(leak={leak!r}, seed={self.seed}, reduction={self.reduction!r})"


def _validate_leak(leak) -> tuple[float, ...]:
    values = tuple(leak) if isinstance(leak, (list, tuple)) else (leak,)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            raise ValueError(f"GradDrop option leak={leak!r} is not valid; allowed: a number in [0, 1] or K such numbers")
    return tuple(float(v) for v in values)
