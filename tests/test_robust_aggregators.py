"""Krum / Multi-Krum (Blanchard et al., NeurIPS 2017, arXiv 1703.02757) and the coordinate-wise
trimmed mean (Yin et al., ICML 2018, arXiv 1803.01498): against TorchJD 0.18's ``Krum`` and
``TrimmedMean`` (option names: ``n_byzantine``/``n_selected``, ``trim_number``), against numpy
transcriptions of the definitions, hand-computed values, and corrupted rows that do not move
the result."""

import numpy as np
import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build
from morl.aggregators import krum as krum_module


def _honest(seed, k, d, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    center = torch.randn(d, generator=gen, dtype=torch.float64)
    return (center + 0.3 * torch.randn(k, d, generator=gen, dtype=torch.float64)).to(dtype)


def _krum_paper(g, f, m):
    """Section 4: s(i) = Σ of the K − f − 2 smallest ‖g_i − g_j‖² over j ≠ i; Multi-Krum
    averages the m rows of least score (stable order on ties)."""
    k = len(g)
    dist = ((g[:, None, :] - g[None, :, :]) ** 2).sum(-1)
    scores = np.array([np.sort(np.delete(dist[i], i))[: k - f - 2].sum() for i in range(k)])
    best = np.argsort(scores, kind="stable")[:m]
    return g[best].mean(0)


@pytest.mark.parametrize("k, f, m", [(5, 1, 1), (7, 2, 1), (9, 3, 2), (12, 2, 4), (20, 5, 3)])
def test_krum_matches_torchjd(k, f, m):
    """TorchJD scores by the sum of (unsquared) distances: score="distance" here. Over seeds
    0..5 the same rows are selected; worst |d − d_tj| = 0 (same rows averaged); bound 1e-12."""
    for seed in range(6):
        j = _honest(seed, k, 17)
        ref = tj.Krum(n_byzantine=f, n_selected=m)(j)
        ours = build("krum", n_byzantine=f, m=m, score="distance")(j)
        torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("k, f, m", [(3, 0, 1), (5, 1, 1), (8, 2, 3), (15, 4, 1), (30, 10, 5)])
def test_krum_matches_the_paper(k, f, m):
    """The paper's squared-distance score, numpy on the vectors (no Gramian). Over seeds 0..7:
    identical selections, worst error 8.9e-16 (Multi-Krum's mean summed in another order);
    bound 1e-12. (The two scores pick different rows in 18 of 200 draws at K = 9, f = 2.)"""
    for seed in range(8):
        j = _honest(seed, k, 23)
        ref = _krum_paper(j.numpy(), f, m)
        np.testing.assert_allclose(build("krum", n_byzantine=f, m=m)(j).numpy(), ref, rtol=0, atol=1e-12)


def test_krum_hand_computed():
    """Rows 0, 1, 2 near (1, 0), row 3 far: f = 0, K − f − 2 = 2 neighbours. Scores (squared):
    s0 = 0.01 + 0.02 = 0.03, s1 = 0.01 + 0.05 = 0.06, s2 = 0.02 + 0.05 = 0.07, s3 huge -> row 0;
    Multi-Krum m = 2 -> mean of rows 0 and 1."""
    j = torch.tensor([[1.0, 0.0], [1.1, 0.0], [0.9, 0.1], [50.0, 50.0]], dtype=torch.float64)
    agg = build("krum")
    torch.testing.assert_close(agg(j), j[0])
    torch.testing.assert_close(agg.weights, torch.tensor([1.0, 0, 0, 0], dtype=torch.float64))
    torch.testing.assert_close(build("krum", m=2)(j), (j[0] + j[1]) / 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_krum_ignores_byzantine_rows(dtype):
    """n honest rows and f rows of huge values: every honest row's K − f − 2 = n − 2 nearest
    rows are honest, so Krum(H ∪ B, f) = Krum(H, 0), whatever the corruption's size (1e3..1e12
    here: float32's Gramian of the 1e12 rows overflows and is redone in float64 on CPU)."""
    for seed in range(6):
        n, f = 9, 3
        honest = _honest(seed, n, 31, dtype)
        expected = build("krum")(honest)
        gen = torch.Generator().manual_seed(50 + seed)
        for size in (1e3, 1e6, 1e12):
            bad = (size * torch.randn(f, 31, generator=gen, dtype=torch.float64)).to(dtype)
            rows = torch.cat([bad[:1], honest[:4], bad[1:], honest[4:]])
            assert torch.equal(build("krum", n_byzantine=f)(rows), expected), (seed, size)


def test_krum_is_permutation_invariant_without_ties():
    for seed in range(6):
        j = _honest(seed, 11, 19)
        perm = torch.randperm(11, generator=torch.Generator().manual_seed(seed))
        d, dp = build("krum", n_byzantine=2, m=3)(j), build("krum", n_byzantine=2, m=3)(j[perm])
        torch.testing.assert_close(dp, d, rtol=0, atol=1e-14)  # the same 3 rows, summed in another order


def test_krum_options():
    with pytest.raises(ValueError, match=r"Krum option n_byzantine=2 is not valid for K=6 rows; allowed: K >= 2\*n_byzantine \+ 3"):
        build("krum", n_byzantine=2)(torch.randn(6, 4))
    with pytest.raises(ValueError, match=r"Krum option n_byzantine=1 is not valid for K=4 rows"):
        build("krum", n_byzantine=1)(torch.randn(4, 4))  # the smallest f: K > 2f + 2 still holds it to K >= 5
    assert build("krum", n_byzantine=2)(torch.randn(7, 4)).shape == (4,)
    with pytest.raises(ValueError, match="Krum option m=6 is not valid for K=7 rows and n_byzantine=2"):
        build("krum", n_byzantine=2, m=6)(torch.randn(7, 4))
    for bad in ({"n_byzantine": -1}, {"n_byzantine": 1.5}, {"m": 0}, {"score": "l1"}):
        with pytest.raises(ValueError, match="Krum option"):
            build("krum", **bad)


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
    with pytest.raises(ValueError, match=r"TrimmedMean option trim=2 is not valid for K=4 rows; allowed: K >= 2\*trim \+ 1"):
        build("trimmed_mean", trim=2)(torch.randn(4, 3))
    for bad in ({"trim": -1}, {"trim": 0.5}):
        with pytest.raises(ValueError, match="TrimmedMean option"):
            build("trimmed_mean", **bad)


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("krum", {"n_byzantine": -1}, r"^Krum option n_byzantine=-1 is not valid; allowed: a finite int >= 0"),
        ("krum", {"m": 0}, r"^Krum option m=0 is not valid; allowed: a finite int >= 1"),
        ("krum", {"m": 1.5}, r"^Krum option m=1.5 is not valid; allowed: a finite int >= 1"),
        ("krum", {"score": "l1"}, r"^Krum option score='l1' is not valid; allowed: squared, distance"),
        ("trimmed_mean", {"trim": 0.5}, r"^TrimmedMean option trim=0.5 is not valid; allowed: a finite int >= 0"),
    ],
)
def test_option_errors_name_the_option_and_what_is_allowed(name, options, message):
    with pytest.raises(ValueError, match=message):
        build(name, **options)


@pytest.mark.parametrize("path", ["host", "torch"])
@pytest.mark.parametrize("score", ["squared", "distance"])
def test_krum_reads_a_rounded_negative_distance_as_zero(path, score, monkeypatch):
    """Rows 0 and 1 are the same gradient b, but the Gramian came back with G_01 one part in
    1e12 above G_00 = G_11 (rounding, e.g. after an all-reduce): ‖g_0 − g_1‖² computes as
    −2e-12. Krum must read it as 0 (its square root would be NaN). Rows 2..6 sit at ‖g_r − b‖²
    = s² and ‖g_r − g_q‖² = 0.8 s² (s = 0.1); with f = 2 each score sums K − f − 2 = 3
    distances: row 0's is 0 + 2s² (squared) against the others' 3 · 0.8 s², so row 0 is chosen
    (by 20 %; 2s against 2.68s with ``score="distance"``). Had the pair's distance been read as
    anything above s², row 0's score would be 3s² and row 2 would win.
    ``path``: the Python-float path (one CPU Gramian) or the torch path (host path declined,
    as on a GPU or under compile)."""
    d, step = 8, 0.1
    e = torch.eye(d, dtype=torch.float64)
    b = e[0]
    j = torch.stack([b, b] + [b + step * (0.6**0.5 * e[1] + 0.4**0.5 * e[2 + i]) for i in range(5)])
    g = j @ j.T
    g[0, 1] = g[1, 0] = g[0, 0] * (1 + 1e-12)
    agg = build("krum", n_byzantine=2, score=score)
    if path == "torch":
        monkeypatch.setattr(krum_module, "gramian_rows", lambda gram: None)
    w = agg.weights_from_gramian(g)
    torch.testing.assert_close(w, torch.tensor([1.0, 0, 0, 0, 0, 0, 0], dtype=torch.float64), rtol=0, atol=0)


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
