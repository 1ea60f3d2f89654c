"""GradDrop (Chen et al., NeurIPS 2020, arXiv 2010.06808, Algorithm 1): gradient sign dropout. Per
coordinate, purity P_c = ½(1 + Σ_k g_kc / Σ_k |g_kc|) and a uniform U_c give M_kc = 1 when
(P_c > U_c, g_kc > 0) or (P_c < U_c, g_kc < 0); with leaks ℓ_k,
d_c = Σ_k (ℓ_k + (1 − ℓ_k) M_kc) g_kc (÷ K for "mean"), unbiased: E_U[d_c] = Σ_k g_kc.
"""

from collections.abc import Sequence

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators._preference import on_device
from morl.aggregators._seeded import SeededDraws
from morl.aggregators.base import Aggregator

REDUCTIONS = ("mean", "sum")


class GradDrop(SeededDraws, Aggregator):
    """Gradient sign dropout on the [K, D] gradients (as TorchJD; the paper uses one layer's
    activations). Options: ``leak`` (0.0; one number or K in [0, 1]), ``seed`` (0),
    ``reduction`` "mean" (default) or "sum" (the paper, TorchJD). ``weights`` are a summary:
    each task's share of its L1 mass that reaches d (× 1/K for "mean").
    """

    direction_is_weighted = False  # the masks are per coordinate

    def __init__(
        self,
        leak: float | Sequence[float] = 0.0,
        seed: int = 0,
        reduction: str = "mean",
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self._init_seed("GradDrop", seed)
        check_choice("GradDrop", "reduction", reduction, REDUCTIONS)
        self.leak = check_number("GradDrop", "leak", leak, high=1.0, many=True)
        self.reduction = reduction
        self._leak_on: dict = {}

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        k = grads.shape[0]
        if len(self.leak) not in (1, k):
            raise ValueError(f"GradDrop option leak has {len(self.leak)} values; allowed: 1 or K={k}")
        leak = on_device(self._leak_on, self.leak, grads).expand(k) if any(self.leak) else None
        total = grads.sum(0)
        mass = torch.linalg.vector_norm(grads, ord=1, dim=0)  # Σ_k |g_kc| without a |G| copy
        purity = 0.5 * (1.0 + total / torch.where(mass > 0, mass, 1.0))
        u = torch.rand(
            grads.shape[1], generator=self._generator_for(grads.device), dtype=grads.dtype, device=grads.device
        )
        keep_pos, keep_neg = (purity > u).to(grads.dtype), (purity < u).to(grads.dtype)
        direction, kept, l1 = self._masked_part(grads.clamp(min=0.0), keep_pos, leak)
        neg_direction, neg_kept, neg_l1 = self._masked_part(grads.clamp(max=0.0), keep_neg, leak)
        direction = direction + neg_direction
        if leak is not None:
            direction = direction + leak @ grads
        share = (kept - neg_kept) / torch.where(l1 - neg_l1 > 0, l1 - neg_l1, 1.0)  # kept L1 / L1 per task
        scale = 1.0 / k if self.reduction == "mean" else 1.0
        self.weights = scale * (share if leak is None else leak + (1.0 - leak) * share)
        return scale * direction

    @staticmethod
    def _masked_part(part: torch.Tensor, keep: torch.Tensor, leak: torch.Tensor | None):
        """(Σ_k (1 − ℓ_k) part_k ∘ keep, per-task kept sum, per-task sum) of one sign's part."""
        summed = part.sum(0) if leak is None else (1.0 - leak) @ part
        return keep * summed, part @ keep, part.sum(1)

    def __repr__(self) -> str:
        leak = self.leak[0] if len(self.leak) == 1 else list(self.leak)
        return f"GradDrop(leak={leak!r}, seed={self.seed}, reduction={self.reduction!r})"
