"""STCH (Lin et al., arXiv 2402.19078) against the authors' STCH_MTL weighting transcribed here
(epochs replaced by calls), the paper's smooth max for the "min" and "zero" ideal points, and
hand values."""

from __future__ import annotations

import math

import pytest
import torch

from morl.aggregators import build
from tests.loss_weighting_helpers import autograd_weights, close, loss_sequence


class _STCHReference:
    """The authors' STCH_MTL weighting with epochs replaced by calls (see morl/aggregators/stch.py)."""

    def __init__(self, k, mu, warmup):
        self.k, self.mu, self.warmup = k, mu, warmup
        self.step, self.total, self.count, self.nadir = 0, 0.0, 0, None

    def weights(self, losses):
        self.step += 1
        if self.step <= self.warmup or (self.warmup == 0 and self.step == 1):
            self.total, self.count = self.total + losses, self.count + 1
        if self.step <= self.warmup:
            return autograd_weights(lambda x: torch.log(x + 1e-20).sum(), losses)
        if self.nadir is None:
            self.nadir = self.total / self.count

        def objective(x):
            f = torch.log(x / self.nadir + 1e-20)
            return self.mu * torch.log(torch.exp((f - f.max().detach()) / self.mu).sum()) * self.k

        return autograd_weights(objective, losses)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("warmup", [0, 3])
def test_stch_nadir_matches_the_authors_code(seed, warmup):
    gen = torch.Generator().manual_seed(seed)
    k, mu = 2 + seed, [1.0, 0.3, 2.0][seed % 3]
    ref, agg = _STCHReference(k, mu, warmup), build("stch", mu=mu, warmup=warmup)
    for losses in loss_sequence(gen, k, 12):
        close(agg.loss_weights(losses), ref.weights(losses), tol=1e-10)  # +1e-20 inside the log: 1e-20/L relative


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ideal", ["min", "zero"])
def test_stch_min_and_zero_ideal_points(seed, ideal):
    gen = torch.Generator().manual_seed(seed)
    k, mu = 3 + seed, 0.5
    agg = build("stch", mu=mu, ideal=ideal)
    low = torch.full((k,), math.inf, dtype=torch.float64)
    for losses in loss_sequence(gen, k, 12):
        low = torch.minimum(low, losses)
        z = low if ideal == "min" else torch.zeros(k, dtype=torch.float64)
        ref = autograd_weights(lambda x: mu * torch.logsumexp((x - z) / mu, 0), losses)
        close(agg.loss_weights(losses), ref)


def test_stch_hand_values():
    third = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64)
    close(build("stch", ideal="zero").loss_weights(third), [0.25, 0.75])
    agg = build("stch")  # nadir = first losses: weights 1/L, then K softmax(log(L/n)/μ)/L
    close(agg.loss_weights(torch.tensor([1.0, 2.0], dtype=torch.float64)), [1.0, 0.5])
    close(agg.loss_weights(torch.tensor([2.0, 2.0], dtype=torch.float64)), [2 * (2 / 3) / 2, 2 * (1 / 3) / 2])


def test_stch_keeps_the_warm_up_mean_as_its_nadir():
    """The state ``nadir`` (checkpointed, logged) is the mean loss of the warm-up calls, fixed
    once the warm-up ends."""
    agg = build("stch", warmup=2)
    for losses in ([1.0, 4.0], [3.0, 2.0], [9.0, 9.0]):
        agg.loss_weights(torch.tensor(losses, dtype=torch.float64))
    close(agg.nadir, [2.0, 3.0])
