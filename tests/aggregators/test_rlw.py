"""RLW: random loss weights from a seeded generator, against hand draws with the same
generator and TorchJD 0.18's ``Random`` (softmax of torch.randn(K) from the global generator,
in the matrix's dtype: with the same seed on CPU the draws are identical)."""

from __future__ import annotations

import math

import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build
from morl.aggregators.rlw import draw_weights


def _jacobian(seed, k, d=7):
    return torch.randn(k, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_draws_are_softmax_of_the_seeded_normal_and_equal_torchjd(dtype):
    """Call t's weights = softmax(z_t), z_t the t-th torch.randn(K) of a generator seeded with
    ``seed`` (hand computation); TorchJD's Random after torch.manual_seed(seed) draws the same
    z_t, so its directions are equal to ours (exactly, up to the order of the final sum)."""
    for seed in range(5):
        k = 2 + seed
        j = _jacobian(seed, k).to(dtype)
        agg = build("rlw", seed=seed)
        gen = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):  # leave the global generator as other tests found it
            torch.manual_seed(seed)
            for _ in range(3):
                d = agg(j)
                z = torch.randn(k, generator=gen, dtype=dtype)
                w = torch.exp(z - z.max()) / torch.exp(z - z.max()).sum()
                assert torch.allclose(agg.weights, w, rtol=4 * torch.finfo(dtype).eps, atol=0)
                assert torch.allclose(d, w @ j, rtol=1e-5 if dtype == torch.float32 else 1e-12)
                assert torch.allclose(tj.Random()(j), d, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-7)


def test_mean_and_spread_of_the_weights_match_torchjd():
    """Over N = 1500 draws at K = 3, for 2 pairs of independent streams (seed 11 + 2s for ours,
    12 + 2s for TorchJD), the mean and the mean square of each weight agree within 5 standard
    errors of their difference, sqrt(2/N)·sd, and our means are 1/K within 5 standard errors
    (the softmax of an exchangeable draw is exchangeable)."""
    n, k = 1500, 3
    j = torch.eye(k, dtype=torch.float64)
    for s in range(2):
        agg = build("rlw", seed=11 + 2 * s)
        ours = torch.stack([agg(j) for _ in range(n)])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(12 + 2 * s)
            theirs = torch.stack([tj.Random()(j) for _ in range(n)])
        for stat in (lambda w: w, lambda w: w * w):
            a, b = stat(ours), stat(theirs)
            se = math.sqrt(2.0 / n) * torch.cat([a, b]).std(dim=0)
            assert ((a.mean(0) - b.mean(0)).abs() <= 5 * se).all(), s
        se1 = ours.std(dim=0) / math.sqrt(n)
        assert ((ours.mean(0) - 1.0 / k).abs() <= 5 * se1).all(), s


def test_the_other_distributions_by_hand_and_by_their_laws():
    """One draw of each variant equals the hand computation from the same generator; over 3000
    draws (K = 4): Bernoulli weights are 0/1, never all zero, P(w_k = 1) = ½/(1 − 2^−K);
    constrained Bernoulli is one-hot with each task's frequency 1/K; uniform and Dirichlet
    (through the softmax, as the authors' code) sum to 1 with mean 1/K; all within 5 standard errors."""
    k, n = 4, 2000
    j = torch.eye(k, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    hand = {
        "uniform": torch.softmax(torch.rand(k, generator=gen, dtype=torch.float64), 0),
        "dirichlet": None,
    }
    gen = torch.Generator().manual_seed(0)
    e = -torch.log1p(-torch.rand(k, generator=gen, dtype=torch.float64))
    hand["dirichlet"] = torch.softmax(e / e.sum(), 0)
    gen = torch.Generator().manual_seed(0)
    rows = (torch.rand(64, k, generator=gen, dtype=torch.float64) < 0.5).to(torch.float64)
    hand["bernoulli"] = rows[(rows.sum(1) > 0).nonzero()[0, 0]]
    gen = torch.Generator().manual_seed(0)
    hand["constrained_bernoulli"] = torch.nn.functional.one_hot(torch.randint(0, k, (1,), generator=gen), k)[0].double()
    for dist, w in hand.items():
        agg = build("rlw", distribution=dist, seed=0)
        assert torch.allclose(agg(j), w, atol=1e-15), dist
    for dist in ("uniform", "dirichlet", "bernoulli", "constrained_bernoulli"):
        gen = torch.Generator().manual_seed(5)
        draws = torch.stack([draw_weights(k, dist, gen, torch.float64, torch.device("cpu")) for _ in range(n)])
        if dist == "bernoulli":
            assert ((draws == 0) | (draws == 1)).all() and (draws.sum(1) > 0).all()
            p = 0.5 / (1 - 2.0**-k)
            se = math.sqrt(p * (1 - p) / n)
            assert ((draws.mean(0) - p).abs() <= 5 * se).all()
            continue
        if dist == "constrained_bernoulli":
            assert (draws.sum(1) == 1).all() and ((draws == 0) | (draws == 1)).all()
        else:
            assert torch.allclose(draws.sum(1), torch.ones(n, dtype=torch.float64))
        se = draws.std(0) / math.sqrt(n)
        assert ((draws.mean(0) - 1.0 / k).abs() <= 5 * se).all(), dist


def test_weighted_loss_and_loss_weights_draw_the_seeded_sequence():
    """The one-backward path draws as calls on the matrix do: the t-th draw is softmax of the
    t-th torch.randn(K) of a generator seeded with ``seed``, in the losses' dtype, and
    weighted_loss(L) = w · L."""
    losses = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    agg, gen = build("rlw", seed=4), torch.Generator().manual_seed(4)
    for _ in range(3):
        w = torch.softmax(torch.randn(3, generator=gen, dtype=torch.float64), 0)
        torch.testing.assert_close(agg.weighted_loss(losses), w @ losses, rtol=1e-15, atol=0)
        torch.testing.assert_close(agg.weights, w, rtol=1e-15, atol=0)
        w = torch.softmax(torch.randn(3, generator=gen, dtype=torch.float64), 0)
        torch.testing.assert_close(agg.loss_weights(losses), w, rtol=1e-15, atol=0)
    with pytest.raises(ValueError, match="distribution"):
        build("rlw", distribution="gamma")
