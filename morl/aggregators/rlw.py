"""Random loss weighting (Lin, Ye, Zhang, Tsang, "Reasonable Effectiveness of Random Weighting:
A Litmus Test for Multi-Task Learning", TMLR 2022, arXiv 2111.10603).

Every step draws fresh weights w = f(z), z ~ p, independent of the losses and gradients, and
descends Σ_k w_k L_k (RLW; on a [K, D] matrix the same w gives Σ_k w_k g_k). The default is the
paper's and LibMTL's: z ~ N(0, I), w = softmax(z). The authors' LibMTL also offered uniform and
Dirichlet draws (through the same softmax), Bernoulli(½) draws (an all-zero draw redrawn; 0/1
weights, not normalised) and "constrained Bernoulli" (one task chosen uniformly, weight 1).
"""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_choice
from morl.aggregators._seeded import SeededDraws
from morl.aggregators.loss_weighting import LossWeighting

DISTRIBUTIONS = ("normal", "uniform", "dirichlet", "bernoulli", "constrained_bernoulli")
#: Bernoulli rows drawn at once: the first non-zero one is the rejection sampler's draw; all
#: of them are zero with probability 2^(−64K) (then the last, zero, row is used).
BERNOULLI_ROWS = 64


def draw_weights(k: int, distribution: str, gen, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """One draw of the K weights, on ``device`` from ``gen`` (no host sync)."""
    opts = dict(generator=gen, dtype=dtype, device=device)
    if distribution == "normal":
        return torch.softmax(torch.randn(k, **opts), dim=0)
    if distribution == "uniform":
        return torch.softmax(torch.rand(k, **opts), dim=0)
    if distribution == "dirichlet":  # Dir(1): normalised Exp(1) draws, then the code's softmax
        e = -torch.log1p(-torch.rand(k, **opts))
        return torch.softmax(e / e.sum(), dim=0)
    if distribution == "bernoulli":
        rows = (torch.rand(BERNOULLI_ROWS, k, **opts) < 0.5).to(dtype)
        first = (rows.sum(-1) > 0).to(torch.int8).argmax()  # 0 when every row is zero
        return rows.index_select(0, first.reshape(1)).squeeze(0)
    choice = torch.randint(0, k, (1,), generator=gen, device=device)
    return torch.zeros(k, dtype=dtype, device=device).scatter(0, choice, 1.0)


class RLW(SeededDraws, LossWeighting):
    """Random loss weighting: fresh random weights at every call, from a seeded generator.

    Options: ``distribution`` ("normal": softmax of N(0, I), the paper's default; "uniform",
    "dirichlet", "bernoulli", "constrained_bernoulli" as in the authors' LibMTL), ``seed`` (0).
    The draws are made on the losses' (or gradients') device, in their dtype, by one generator
    per device (saved by ``state_dict()``). Needs neither the losses nor the gradients: learners
    backpropagate ``weighted_loss(losses)`` once.
    """

    needs_losses = False

    def __init__(self, distribution: str = "normal", seed: int = 0, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        check_choice("RLW", "distribution", distribution, DISTRIBUTIONS)
        self.distribution = distribution
        self._init_seed("RLW", seed)

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        return self._draw(losses.shape[0], losses)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        w = self._draw(grads.shape[0], grads)
        self.weights = w
        return w @ grads

    def _draw(self, k: int, like: torch.Tensor) -> torch.Tensor:
        return draw_weights(k, self.distribution, self._generator_for(like.device), like.dtype, like.device)

    def __repr__(self) -> str:
        return f"RLW(distribution={self.distribution!r}, seed={self.seed})"
