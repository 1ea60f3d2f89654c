"""Krum and Multi-Krum (Blanchard et al., NeurIPS 2017, arXiv 1703.02757, Sections 4 and 5): with f
of the K rows possibly Byzantine, score each row by

    s(i) = Σ_{j ∈ N(i)} ‖g_i − g_j‖²,   N(i) = its K − f − 2 nearest other rows,

and return the row of least score (Multi-Krum: the mean of the m best). Distances come from the
Gramian. The resilience proof needs K > 2f + 2 (Proposition 1), enforced for f ≥ 1.
"""

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators.base import GramianAggregator

SCORES = ("squared", "distance")


class Krum(GramianAggregator):
    """Byzantine-robust selection of the most central row(s); ties go to the lower index.

    Options: ``n_byzantine`` f (0), ``m`` (1 = Krum; m > 1 = Multi-Krum, at most K − f),
    ``score`` "squared" (the paper) or "distance" (TorchJD's ``Krum``).
    """

    _REPR = ("n_byzantine", "m", "score")

    def __init__(self, n_byzantine: int = 0, m: int = 1, score: str = "squared", check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self.n_byzantine = check_number("Krum", "n_byzantine", n_byzantine, integer=True)
        self.m = check_number("Krum", "m", m, low=1, integer=True)
        check_choice("Krum", "score", score, SCORES)
        self.score = score

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        k, f = gram.shape[0], self.n_byzantine
        if f > 0 and k < 2 * f + 3:
            raise ValueError(
                f"Krum option n_byzantine={f} is not valid for K={k} rows; allowed: K >= 2*n_byzantine + 3 (K > 2f + 2)"
            )
        if self.m > k - f:
            raise ValueError(
                f"Krum option m={self.m} is not valid for K={k} rows and n_byzantine={f}; allowed: 1 <= m <= K - n_byzantine"
            )
        g = gram.to(torch.float64)
        sq = torch.diagonal(g)
        # G_ii + G_jj − (G_ij + G_ji): exactly symmetric, so mutual nearest neighbours tie exactly
        dist = (sq.unsqueeze(0) + sq.unsqueeze(1) - (g + g.T)).clamp(min=0.0)
        if self.score == "distance":
            dist = dist.sqrt()
        dist.fill_diagonal_(float("inf"))  # a row is not its own neighbour
        near = max(k - f - 2, 0)
        scores = torch.sort(dist, dim=1).values[:, :near].sum(1)
        best = torch.sort(scores, stable=True).indices[: self.m]
        return torch.zeros(k, dtype=g.dtype, device=g.device).index_fill(0, best, 1.0 / self.m)
