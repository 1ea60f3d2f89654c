"""Uncertainty weighting (Kendall, Gal, Cipolla, CVPR 2018, arXiv 1705.07115, Sec. 3.2).

Objective, in the common form with s_k = log σ_k² learned (the paper's Gaussian-likelihood
loss, used for every task as LibMTL and the FAMO authors' baseline do; the paper's
classification form L_k/σ_k² + log σ_k differs by a factor 2 on the weight):

    Σ_k ½ e^{−s_k} L_k + ½ s_k     (= L_k / (2σ_k²) + log σ_k)

so the network's weights are w_k = ½ e^{−s_k}, and ∂/∂s_k = ½ (1 − e^{−s_k} L_k) drives
σ_k² towards L_k. The step on s uses the current losses, after the weights are taken, by
Adam (lr ``lr``): the FAMO authors' MT10 UW baseline (``actor_logsigma_optimizer``, Adam,
w_lr = 0.025). Kendall et al. train s with the network's own optimizer instead.
"""

from __future__ import annotations

import torch

from morl.aggregators._adam import adam_step
from morl.aggregators._checks import check_number
from morl.aggregators.loss_weighting import LossWeighting


class UW(LossWeighting):
    """Uncertainty weighting: w_k = ½ e^{−s_k}, s = log σ² stepped by Adam inside each call.

    Options: ``lr`` (0.025) of the Adam step on s, ``init_log_var`` (0.0: σ² = 1, w = ½;
    LibMTL starts at −0.5). State: ``log_var``, Adam's ``m``, ``v``, ``step``.
    """

    _STATE = ("log_var", "m", "v", "step")

    def __init__(self, lr: float = 0.025, init_log_var: float = 0.0, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        check_number("UW", "lr", lr)
        check_number("UW", "init_log_var", init_log_var, low=-float("inf"))
        self.lr = float(lr)
        self.init_log_var = float(init_log_var)

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        if name == "log_var":
            return torch.full_like(like, self.init_log_var)
        return torch.zeros_like(like)

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        s = self._get("log_var", losses)
        w = 0.5 * torch.exp(-s)
        grad = 0.5 - w * losses  # ∂/∂s of ½ e^{−s} L + ½ s
        s, self.m, self.v, self.step = adam_step(s, grad, self._get("m", losses), self._get("v", losses),
                                                 self._count("step", losses), self.lr)
        self.log_var = s
        return w

    def __repr__(self) -> str:
        return f"UW(lr={self.lr:g}, init_log_var={self.init_log_var:g})"
