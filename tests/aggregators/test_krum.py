"""Krum / Multi-Krum (Blanchard et al., NeurIPS 2017, arXiv 1703.02757) against TorchJD 0.18's
``Krum`` (``n_byzantine``/``n_selected``), a numpy transcription of Section 4, hand-computed
values, and corrupted rows that do not move the result."""

import numpy as np
import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build


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
    with pytest.raises(
        ValueError, match=r"Krum option n_byzantine=2 is not valid for K=6 rows; allowed: K >= 2\*n_byzantine \+ 3"
    ):
        build("krum", n_byzantine=2)(torch.randn(6, 4))
    with pytest.raises(ValueError, match=r"Krum option n_byzantine=1 is not valid for K=4 rows"):
        build("krum", n_byzantine=1)(torch.randn(4, 4))  # the smallest f: K > 2f + 2 still holds it to K >= 5
    assert build("krum", n_byzantine=2)(torch.randn(7, 4)).shape == (4,)
    with pytest.raises(ValueError, match="Krum option m=6 is not valid for K=7 rows and n_byzantine=2"):
        build("krum", n_byzantine=2, m=6)(torch.randn(7, 4))
    for bad in ({"n_byzantine": -1}, {"n_byzantine": 1.5}, {"m": 0}, {"score": "l1"}):
        with pytest.raises(ValueError, match="Krum option"):
            build("krum", **bad)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"n_byzantine": -1}, r"^Krum option n_byzantine=-1 is not valid; allowed: a finite int >= 0"),
        ({"m": 0}, r"^Krum option m=0 is not valid; allowed: a finite int >= 1"),
        ({"m": 1.5}, r"^Krum option m=1.5 is not valid; allowed: a finite int >= 1"),
        ({"score": "l1"}, r"^Krum option score='l1' is not valid; allowed: squared, distance"),
    ],
)
def test_krum_option_errors_name_the_option_and_what_is_allowed(options, message):
    with pytest.raises(ValueError, match=message):
        build("krum", **options)


@pytest.mark.parametrize("score", ["squared", "distance"])
def test_krum_reads_a_rounded_negative_distance_as_zero(score):
    """Rows 0 and 1 are the same gradient b, but the Gramian came back with G_01 one part in
    1e12 above G_00 = G_11 (rounding, e.g. after an all-reduce): ‖g_0 − g_1‖² computes as
    −2e-12. Krum must read it as 0 (its square root would be NaN). Rows 2..6 sit at ‖g_r − b‖²
    = s² and ‖g_r − g_q‖² = 0.8 s² (s = 0.1); with f = 2 each score sums K − f − 2 = 3
    distances: row 0's is 0 + 2s² (squared) against the others' 3 · 0.8 s², so row 0 is chosen
    (by 20 %; 2s against 2.68s with ``score="distance"``). Had the pair's distance been read as
    anything above s², row 0's score would be 3s² and row 2 would win."""
    d, step = 8, 0.1
    e = torch.eye(d, dtype=torch.float64)
    b = e[0]
    j = torch.stack([b, b] + [b + step * (0.6**0.5 * e[1] + 0.4**0.5 * e[2 + i]) for i in range(5)])
    g = j @ j.T
    g[0, 1] = g[1, 0] = g[0, 0] * (1 + 1e-12)
    agg = build("krum", n_byzantine=2, score=score)
    w = agg.weights_from_gramian(g)
    torch.testing.assert_close(w, torch.tensor([1.0, 0, 0, 0, 0, 0, 0], dtype=torch.float64), rtol=0, atol=0)
