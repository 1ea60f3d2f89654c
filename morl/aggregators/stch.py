"""Smooth Tchebycheff scalarization (Lin et al., ICML 2024, arXiv 2402.19078):

    g_μ(L) = μ log Σ_k exp((f_k − z_k) / μ),   w_k = ∂g/∂L_k,

a smooth max of the gaps to an ideal point z. ``ideal``: "nadir" (the authors' MTL code):
f_k = log(L_k / n_k), z = 0, times K, so w = K softmax(f/μ)_k / L_k, n the mean loss over the
``warmup`` first calls (w = 1/L meanwhile; warmup=0: the first call's losses); "min": f = L,
z = the running minimum of the losses; "zero": f = L, z = 0.
"""

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators.loss_weighting import LossWeighting, positive

IDEALS = ("nadir", "min", "zero")


class STCH(LossWeighting):
    """Smooth Tchebycheff weights. Options: ``mu`` (1.0), ``ideal`` ("nadir"), ``warmup`` (0
    calls). State: ``acc`` and ``seen`` (warm-up sum and count), ``nadir``, ``low`` ("min")."""

    _STATE = ("acc", "seen", "nadir", "low")
    _REPR = ("mu", "ideal", "warmup")

    def __init__(self, mu: float = 1.0, ideal: str = "nadir", warmup: int = 0, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self.mu = check_number("STCH", "mu", mu, strict=True)
        check_choice("STCH", "ideal", ideal, IDEALS)
        self.ideal, self.warmup = ideal, check_number("STCH", "warmup", warmup, integer=True)

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        if name == "low":
            return torch.full_like(like, torch.finfo(like.dtype).max)
        return torch.zeros_like(like)

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        if self.ideal == "zero":
            return torch.softmax(losses / self.mu, dim=0)
        if self.ideal == "min":
            self.low = torch.minimum(self._get("low", losses), losses)
            return torch.softmax((losses - self.low) / self.mu, dim=0)
        seen, acc = self._count("seen", losses), self._get("acc", losses)
        warming = seen < self.warmup
        adding = warming | (seen == 0)  # the nadir is fixed when the warm-up ends (at once for warmup=0)
        self.acc, self.seen = torch.where(adding, acc + losses, acc), torch.where(adding, seen + 1, seen)
        self.nadir = positive(self.acc / self.seen)
        floored = positive(losses)
        stch = losses.shape[0] * torch.softmax(torch.log(floored / self.nadir) / self.mu, dim=0) / floored
        return torch.where(warming, 1.0 / floored, stch)
