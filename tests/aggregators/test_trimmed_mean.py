"""The coordinate-wise trimmed mean (Yin et al., ICML 2018, arXiv 1803.01498, Definition 2)
against TorchJD 0.18's ``TrimmedMean`` (``trim_number``), numpy, hand-computed values, and
corrupted rows that do not move the result."""

import numpy as np
import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build


def _honest(seed, k, d, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    center = torch.randn(d, generator=gen, dtype=torch.float64)
    return (center + 0.3 * torch.randn(k, d, generator=gen, dtype=torch.float64)).to(dtype)


@pytest.mark.parametrize("k, t", [(3, 1), (5, 2), (8, 1), (10, 3), (25, 6)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_trimmed_mean_matches_torchjd_and_numpy(k, t, dtype):
    """TorchJD's ``trim_number`` is ``trim``; numpy: sort each column, drop t at each end, mean.
    Over seeds 0..5: worst error 0 against TorchJD (same sort, same mean), and 1.1e-7 (float32)
    / 2.3e-16 (float64) of max|g| against numpy's float64 mean; bounds 1e-6 / 1e-14."""
    tol = 1e-6 if dtype == torch.float32 else 1e-14
    for seed in range(6):
        j = _honest(seed, k, 40, dtype)
        ours = build("trimmed_mean", trim=t)(j)
        assert (ours - tj.TrimmedMean(trim_number=t)(j)).abs().max() <= tol * j.abs().max()
        ref = np.sort(j.double().numpy(), axis=0)[t : k - t].mean(0)
        assert np.abs(ours.double().numpy() - ref).max() <= tol * j.abs().max().item()


def test_trimmed_mean_hand_computed():
    """Column 0: 1, 2, 3, 100 -> drop 1 and 100 -> 2.5; column 1: 0, 1, -5, 2 -> drop -5 and 2
    -> 0.5. Column 0 keeps rows 1, 2; column 1 keeps rows 0, 1."""
    j = torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, -5.0], [100.0, 2.0]], dtype=torch.float64)
    agg = build("trimmed_mean", trim=1)
    torch.testing.assert_close(agg(j), torch.tensor([2.5, 0.5], dtype=torch.float64))
    # col 0 keeps rows 1, 2; col 1 keeps rows 0, 1 -> counts (1, 2, 1, 0) / (D (K − 2t)) = / 4
    torch.testing.assert_close(agg.weights, torch.tensor([0.25, 0.5, 0.25, 0.0], dtype=torch.float64))
    torch.testing.assert_close(build("trimmed_mean")(j), j.mean(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_trimmed_mean_ignores_corrupted_rows(dtype):
    """f rows of huge values of either sign: per coordinate they are among the f largest or f
    smallest, so with trim = f the result is the same for corruption sizes 1e3..1e30 and stays
    within the honest rows' coordinate range."""
    for seed in range(6):
        n, f = 8, 2
        honest = _honest(seed, n, 25, dtype)
        gen = torch.Generator().manual_seed(70 + seed)
        signs = torch.where(torch.rand(f, 25, generator=gen) < 0.5, -1.0, 1.0).to(dtype)
        outs = []
        for size in (1e3, 1e12, 1e30):
            bad = signs * size
            outs.append(build("trimmed_mean", trim=f)(torch.cat([honest[:3], bad, honest[3:]])))
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2]), seed
        assert (outs[0] >= honest.amin(0)).all() and (outs[0] <= honest.amax(0)).all()


def test_trimmed_mean_options():
    with pytest.raises(
        ValueError, match=r"TrimmedMean option trim=2 is not valid for K=4 rows; allowed: K >= 2\*trim \+ 1"
    ):
        build("trimmed_mean", trim=2)(torch.randn(4, 3))
    for bad in ({"trim": -1}, {"trim": 0.5}):
        with pytest.raises(ValueError, match="TrimmedMean option"):
            build("trimmed_mean", **bad)


def test_trimmed_mean_option_error_names_the_option_and_what_is_allowed():
    with pytest.raises(ValueError, match=r"^TrimmedMean option trim=0.5 is not valid; allowed: a finite int >= 0"):
        build("trimmed_mean", trim=0.5)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k, t, d", [(7, 2, 3), (3, 1, 1), (6, 0, 4)])
def test_trimmed_mean_weights_are_each_rows_share_of_the_kept_entries(seed, k, t, d):
    """``weights`` (Definition 2's summary): row r's count of kept entries over D (K − 2t), so
    they sum to 1 (1/K each when nothing is trimmed; with D = 1 and K = 2t + 1, one-hot on the
    median row), in the gradients' dtype. Reference: numpy's argsort per column."""
    j = _honest(seed, k, d)
    agg = build("trimmed_mean", trim=t)
    agg(j)
    order = np.argsort(j.numpy(), axis=0, kind="stable")[t : k - t]
    counts = np.bincount(order.reshape(-1), minlength=k)
    assert agg.weights.dtype == torch.float64
    np.testing.assert_allclose(agg.weights.numpy(), counts / (d * (k - 2 * t)), rtol=0, atol=1e-15)
    assert abs(float(agg.weights.sum()) - 1.0) <= 1e-15
