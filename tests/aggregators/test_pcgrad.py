"""PCGrad (Yu et al., NeurIPS 2020, arXiv 2001.06782, Algorithm 1) against a numpy transcription
of the algorithm on the gradient vectors, TorchJD 0.18's PCGrad over consecutive calls, and the
precision it works in. (One call against TorchJD and the two-task closed form are in the
cross-method suites.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchjd.aggregation as tj

import morl


def _jacobian(seed: int, k: int, d: int = 12, shared: float = -0.3) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(k, d, generator=gen, dtype=torch.float64) + shared * torch.randn(
        1, d, generator=gen, dtype=torch.float64
    )


def _algorithm1(g: np.ndarray, orders: list[list[int]]) -> np.ndarray:
    """Algorithm 1 literally: each g_i projected in its order onto the normal planes of the
    ORIGINAL g_j it conflicts with; the sum of the projected rows."""
    out = g.copy()
    for i, order in enumerate(orders):
        for j in order:
            if j != i and out[i] @ g[j] < 0:
                out[i] = out[i] - (out[i] @ g[j]) / (g[j] @ g[j]) * g[j]
    return out.sum(0)


@pytest.mark.parametrize("k", [2, 3, 6])
def test_pcgrad_projects_as_algorithm1_in_the_seeded_orders(k):
    """The orders are one randperm(K) per task from a generator seeded with ``seed``, drawn anew
    at every call; three calls in a row match the transcription on those orders to 1e-12."""
    for seed in range(3):
        agg = morl.build("pcgrad", seed=seed, reduction="sum")
        gen = torch.Generator().manual_seed(seed)
        for call in range(3):
            j = _jacobian(10 * seed + call, k)
            orders = [torch.randperm(k, generator=gen).tolist() for _ in range(k)]
            expected = _algorithm1(j.numpy(), orders)
            assert np.abs(agg(j).numpy() - expected).max() <= 1e-12 * np.abs(expected).max()


@pytest.mark.parametrize("k", [2, 5])
def test_pcgrad_follows_torchjds_draws_call_after_call(k):
    """TorchJD draws the orders from the global generator; seeded alike, four consecutive calls
    agree (the generator advances the same way, K = 2 included). TorchJD sums."""
    ours = morl.build("pcgrad", seed=7, reduction="sum")
    theirs = tj.PCGrad()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        for call in range(4):
            j = _jacobian(call, k)
            torch.testing.assert_close(ours(j), theirs(j), rtol=1e-10, atol=1e-10 * j.abs().max().item())


def test_pcgrad_projects_in_float64_whatever_the_gramians_dtype():
    """A float32 Gramian and its exact float64 copy give bitwise equal weights: the projections
    subtract nearly equal numbers, which float32 would round to noise (nearly parallel rows,
    one of them flipped)."""
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        k = 3 + 2 * seed
        j = torch.randn(1, 16, generator=gen) + 1e-3 * torch.randn(k, 16, generator=gen)
        j[seed % k] *= -1
        g32 = j @ j.T
        w32 = morl.build("pcgrad", seed=seed).weights_from_gramian(g32)
        w64 = morl.build("pcgrad", seed=seed).weights_from_gramian(g32.double())
        assert torch.equal(w32, w64), seed


def test_pcgrad_defaults_are_seed_0_and_the_mean():
    """As documented: the orders are drawn with seed 0 and the projected rows are averaged (the
    paper sums them: ``reduction="sum"``); a zero row is left alone and never projected onto."""
    agg = morl.build("pcgrad")
    assert (agg.seed, agg.reduction) == (0, "mean")
    j = torch.tensor([[1.0, 0.0], [0.0, 0.0], [-1.0, 1.0]], dtype=torch.float64)
    expected = _algorithm1(j.numpy(), [[0, 1, 2]] * 3) / 3  # K ≤ 3 rows with one conflict: order-free
    torch.testing.assert_close(agg(j), torch.from_numpy(expected))
