"""Mean: the equal-weight average of the K gradients (linear scalarisation with weights 1/K)."""

import torch

from morl.aggregators._checks import check_choice
from morl.aggregators.base import Aggregator


class Mean(Aggregator):
    """d = (1/K) Σ_k g_k (``reduction="mean"``, default) or Σ_k g_k (``"sum"``): the gradient of :meth:`weighted_loss`."""

    needs_grads = False
    _REPR = ("reduction",)

    def __init__(self, reduction: str = "mean", check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        check_choice("Mean", "reduction", reduction, ("mean", "sum"))
        self.reduction = reduction

    def weighted_loss(self, losses: torch.Tensor) -> torch.Tensor:
        self._set_weights(losses)
        return losses.mean() if self.reduction == "mean" else losses.sum()

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        self._set_weights(grads[:, 0])
        return grads.mean(0) if self.reduction == "mean" else grads.sum(0)

    def _set_weights(self, like: torch.Tensor) -> None:
        self.weights = like.new_full(like.shape[:1], 1.0 / like.shape[0] if self.reduction == "mean" else 1.0)
