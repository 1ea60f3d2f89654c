"""UW (Kendall et al., arXiv 1705.07115, Sec. 3.2) against the FAMO authors' MT10 UW baseline
transcribed here: ½ (e^{−s} L + s) summed, s stepped by torch.optim.Adam."""

from __future__ import annotations

import math

import pytest
import torch

from morl.aggregators import build
from tests.loss_weighting_helpers import close, loss_sequence


class _UWReference:
    def __init__(self, k, lr, init):
        self.s = torch.full((k,), init, dtype=torch.float64, requires_grad=True)
        self.opt = torch.optim.Adam([self.s], lr=lr)

    def step(self, losses):
        leaf = losses.clone().requires_grad_(True)
        self.opt.zero_grad()
        (0.5 * (torch.exp(-self.s) * leaf + self.s)).sum().backward()
        self.opt.step()
        return leaf.grad


@pytest.mark.parametrize("seed", range(3))
def test_uw_weights_and_log_variances_follow_the_reference_over_steps(seed):
    gen = torch.Generator().manual_seed(seed)
    k = 2 + 2 * seed
    ref, agg = _UWReference(k, 0.025, -0.5), build("uw", init_log_var=-0.5)
    for losses in loss_sequence(gen, k, 12):
        close(agg.loss_weights(losses), ref.step(losses))
    close(agg.log_var, ref.s.detach())


def test_uw_hand_values():
    agg = build("uw", lr=0.1)
    close(agg.loss_weights(torch.tensor([4.0, 0.5], dtype=torch.float64)), [0.5, 0.5])
    # ∂/∂s = 0.5 - 0.5 L: Adam's first step is -lr·sign: s = (+0.1, -0.1)
    close(agg.log_var, [0.1, -0.1], tol=1e-7)
    close(agg.loss_weights(torch.ones(2, dtype=torch.float64)), [0.5 * math.exp(-0.1), 0.5 * math.exp(0.1)], tol=1e-7)
