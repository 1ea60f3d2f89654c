"""PCGrad's defaults and its working precision: the projections run in float64 whatever the
Gramian's dtype, since they subtract nearly equal numbers (g_i·g_j − (g_i·g_j/‖g_j‖²)‖g_j‖²),
which float32 would round to noise."""

from __future__ import annotations

import torch

import morl


def test_weights_from_a_float32_gramian_equal_those_from_its_float64_copy():
    """The same Gramian (float32 values, exactly representable in float64) in both dtypes, the
    same seed: bitwise equal weights at K = 3..12 over 20 ill-conditioned draws (a float32
    solve differs by ~1e-7 relative)."""
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        k = 3 + seed % 10
        base = torch.randn(1, 16, generator=gen)
        j = base + 1e-3 * torch.randn(k, 16, generator=gen)  # nearly parallel rows
        j[seed % k] *= -1  # one conflicting row
        g32 = j @ j.T
        w32 = morl.build("pcgrad", seed=seed).weights_from_gramian(g32)
        w64 = morl.build("pcgrad", seed=seed).weights_from_gramian(g32.double())
        assert torch.equal(w32, w64), seed


def test_defaults_are_seed_0_and_the_mean():
    """As documented (docs/aggregators.md): the task orders are drawn with seed 0, and the
    projected rows are averaged (the reference code sums them: ``reduction="sum"``)."""
    agg = morl.build("pcgrad")
    assert (agg.seed, agg.reduction) == (0, "mean")
