"""Uncertainty weighting (Kendall, Gal, Cipolla, CVPR 2018, arXiv 1705.07115, Sec. 3.2), in the
Gaussian-likelihood form for every task (LibMTL, the FAMO authors' baseline), s_k = log σ_k²:

    Σ_k ½ e^{−s_k} L_k + ½ s_k,   w_k = ½ e^{−s_k},   ∂/∂s_k = ½ (1 − e^{−s_k} L_k).

s takes one Adam step per call after the weights are taken, as the FAMO authors' MT10 baseline.
"""

import torch

from morl.aggregators._adam import adam_step
from morl.aggregators._checks import check_number
from morl.aggregators.loss_weighting import LossWeighting


class UW(LossWeighting):
    """Uncertainty weighting. Options: ``lr`` (0.025, Adam's on s), ``init_log_var`` (0.0: w = ½).
    State: ``log_var``, Adam's ``m``, ``v``, ``step``."""

    _STATE = ("log_var", "m", "v", "step")
    _REPR = ("lr", "init_log_var")

    def __init__(self, lr: float = 0.025, init_log_var: float = 0.0, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self.lr = check_number("UW", "lr", lr)
        self.init_log_var = check_number("UW", "init_log_var", init_log_var, low=-float("inf"))

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        return torch.full_like(like, self.init_log_var) if name == "log_var" else torch.zeros_like(like)

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        s = self._get("log_var", losses)
        w = 0.5 * torch.exp(-s)
        grad = 0.5 - w * losses  # ∂/∂s of ½ e^{−s} L + ½ s
        s, self.m, self.v, self.step = adam_step(
            s, grad, self._get("m", losses), self._get("v", losses), self._count("step", losses), self.lr
        )
        self.log_var = s
        return w
