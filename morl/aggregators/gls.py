"""Geometric loss strategy (Chennupati, Sistu, Yogamani, Rawashdeh, CVPR Workshops 2019,
arXiv 1904.08492): minimise the geometric mean of the task losses,

    L = (Π_k L_k)^{1/K},   ∂L/∂L_k = (Π_j L_j)^{1/K} / (K L_k) = w_k.

The weights are computed in log space, exp(mean_j log L_j − log L_k) / K, so the product of
K losses never over/underflows (K = 200 losses of 1e-3 would underflow Π L in float64).
Stateless; losses must be positive (others are floored at ε·max_k |L_k|, ε of the dtype:
morl.aggregators.loss_weighting.positive).
LibMTL's GLS backpropagates the same L but returns L_k / (K Π L) as its "weights" for
logging; the weights here are the ones the gradient actually uses.
"""

from __future__ import annotations

import torch

from morl.aggregators.loss_weighting import LossWeighting, positive


class GLS(LossWeighting):
    """Geometric loss strategy: w_k = (Π_j L_j)^{1/K} / (K L_k). No options, no state."""

    def __init__(self, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        log = torch.log(positive(losses))
        return torch.exp(log.mean() - log) / losses.shape[0]

    def __repr__(self) -> str:
        return "GLS()"
