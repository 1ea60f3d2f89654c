"""Random loss weighting (Lin, Ye, Zhang, Tsang, TMLR 2022, arXiv 2111.10603): every step draws
fresh weights w = softmax(z), z ~ N(0, I), independent of losses and gradients. LibMTL's other
draws: uniform and Dirichlet (through the same softmax), Bernoulli(½) (all-zero redrawn) and
"constrained Bernoulli" (one task, weight 1).
"""

import torch

from morl.aggregators._checks import check_choice
from morl.aggregators._seeded import SeededDraws
from morl.aggregators.loss_weighting import LossWeighting

DISTRIBUTIONS = ("normal", "uniform", "dirichlet", "bernoulli", "constrained_bernoulli")
#: Bernoulli rows drawn at once: the first non-zero one is the rejection sampler's draw
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
    """Random loss weighting. Options: ``distribution`` ("normal", the paper's; or one of
    :data:`DISTRIBUTIONS`), ``seed`` (0)."""

    needs_losses = False
    _REPR = ("distribution", "seed")

    def __init__(self, distribution: str = "normal", seed: int = 0, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        check_choice("RLW", "distribution", distribution, DISTRIBUTIONS)
        self.distribution = distribution
        self._init_seed("RLW", seed)

    def loss_weights(self, like: torch.Tensor) -> torch.Tensor:
        return draw_weights(like.shape[0], self.distribution, self._generator_for(like.device), like.dtype, like.device)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        self.weights = self.loss_weights(grads)  # no losses needed: drawn like the gradients
        return self.weights @ grads
