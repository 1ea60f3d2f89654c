"""Dynamic weight average (Liu, Johns, Davison, CVPR 2019, arXiv 1803.10704, Sec. 3.3):

    w_k(t) = K · softmax_k(r(t−1) / T),   r_k(t−1) = L_k(t−1) / L_k(t−2),   w = 1 for t = 1, 2,

with t counted in periods of ``every`` calls and each period's mean loss (the paper: epochs;
set ``every`` to the batches per epoch, or 0 and call :meth:`end_period`).
"""

import torch

from morl.aggregators._checks import check_number
from morl.aggregators._counters import CallCounters
from morl.aggregators.loss_weighting import LossWeighting


class DWA(CallCounters, LossWeighting):
    """Dynamic weight average. Options: ``temperature`` T (2.0), ``every`` (1 call per period).
    State: ``acc`` (this period's loss sum), ``last``/``before`` (the last two period means)."""

    _COUNTED = {"calls": "_calls", "periods": "_periods"}  # extra-state key -> counter (CallCounters)
    _STATE = ("acc", "last", "before")
    _REPR = ("temperature", "every")

    def __init__(self, temperature: float = 2.0, every: int = 1, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self.temperature = check_number("DWA", "temperature", temperature, strict=True)
        self.every = check_number("DWA", "every", every, integer=True)
        self._calls = self._periods = 0

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        k = losses.shape[0]
        if self._periods >= 2:  # plain ints: no device read
            last, before = self._get("last", losses), self._get("before", losses)
            ok = before.abs() > torch.finfo(losses.dtype).tiny
            ratio = torch.where(ok, last / torch.where(ok, before, 1.0), 1.0)
            w = k * torch.softmax(ratio / self.temperature, dim=0)
        else:
            w = torch.ones_like(losses)
        self.acc = self._get("acc", losses) + losses
        self._calls += 1
        if self.every and self._calls == self.every:
            self.end_period()
        return w

    def end_period(self) -> None:
        """Close the current period: its mean loss becomes L(t−1) of the next weights."""
        if self._calls == 0 or self.acc is None:
            return
        self.before, self.last = (
            self.last if self.last is not None else torch.zeros_like(self.acc),
            self.acc / self._calls,
        )
        self.acc = torch.zeros_like(self.acc)
        self._calls = 0
        self._periods += 1
