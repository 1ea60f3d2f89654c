"""Geometric loss strategy (Chennupati et al., CVPR Workshops 2019, arXiv 1904.08492): minimise

    L = (Π_k L_k)^{1/K},   w_k = ∂L/∂L_k = (Π_j L_j)^{1/K} / (K L_k),

computed in log space so the product never over/underflows. Losses must be positive (others
are floored: :func:`morl.aggregators.loss_weighting.positive`).
"""

import torch

from morl.aggregators.loss_weighting import LossWeighting, positive


class GLS(LossWeighting):
    """Geometric loss strategy. No options, no state."""

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        log = torch.log(positive(losses))
        return torch.exp(log.mean() - log) / losses.shape[0]
