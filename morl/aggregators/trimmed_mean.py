"""Coordinate-wise trimmed mean (Yin et al., ICML 2018, arXiv 1803.01498, Definition 2): per
coordinate, drop the ``trim`` largest and ``trim`` smallest of g_1c..g_Kc and average the rest.
"""

import torch

from morl.aggregators._checks import check_number
from morl.aggregators.base import Aggregator


class TrimmedMean(Aggregator):
    """Byzantine-robust coordinate-wise trimmed mean. Option ``trim`` (0 = the mean; K ≥ 2·trim + 1;
    TorchJD's ``trim_number``). ``weights`` are a summary: row k's share of the kept entries."""

    direction_is_weighted = False  # each coordinate keeps other rows
    _REPR = ("trim",)

    def __init__(self, trim: int = 0, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self.trim = check_number("TrimmedMean", "trim", trim, integer=True)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        k, d = grads.shape
        t = self.trim
        if k < 2 * t + 1:
            raise ValueError(f"TrimmedMean option trim={t} is not valid for K={k} rows; allowed: K >= 2*trim + 1")
        if t == 0:
            self.weights = torch.full((k,), 1.0 / k, dtype=grads.dtype, device=grads.device)
            return grads.mean(0)
        values, rows = torch.sort(grads, dim=0)
        kept = rows[t : k - t].reshape(-1)  # the rows that survive, coordinate by coordinate
        ones = torch.ones((), dtype=grads.dtype, device=grads.device).expand(kept.numel())  # no copy
        count = torch.zeros(k, dtype=grads.dtype, device=grads.device).index_add(0, kept, ones)
        self.weights = count / max(d * (k - 2 * t), 1)
        return values[t : k - t].mean(0)
