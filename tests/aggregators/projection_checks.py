"""Inputs and checks shared by the tests of the Gramian-eigen methods (IMTL-G, Aligned-MTL, ConFIG)."""

import math

import torch

from morl.aggregators import build

SEEDS = range(3)
J_BASE = torch.tensor([[-4.0, 1.0, 1.0], [6.0, 1.0, 1.0]], dtype=torch.float64)  # G = [[18, −22], [−22, 38]]
R18, R38 = math.sqrt(18.0), math.sqrt(38.0)


def _jacobian(seed, k, d, rank):
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, rank, generator=gen, dtype=torch.float64) @ torch.randn(
        rank, d, generator=gen, dtype=torch.float64
    )
    return j + 0.5 * torch.randn(k, 1, generator=gen, dtype=torch.float64) @ j[:1]  # a shared direction: mixed signs


def _gram(seed, k, rank):
    j = _jacobian(seed, k, 3 * k, rank)
    return j @ j.T


SHAPES = [
    (4, 8, 1),
    (2, 5, 2),
    (3, 10, 3),
    (5, 20, 2),
    (8, 6, 6),
    (10, 40, 10),
    (20, 60, 20),
    (30, 20, 20),
    (50, 120, 50),
    (50, 60, 25),
]


def _worst_against(name, options, reference):
    """max over seeds and SHAPES of ‖d − d_ref‖ / max‖g‖."""
    worst = 0.0
    for seed in SEEDS:
        for k, d, rank in SHAPES:
            j = _jacobian(seed, k, d, rank)
            worst = max(worst, float((build(name, **options)(j) - reference(j)).norm() / j.norm(dim=1).max()))
    return worst


def _check_hand_values(name, expected, tj_value, dtype):
    agg = build(name)
    d = agg(J_BASE.to(dtype)).double()
    tol = 1e-11 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(agg.weights.double(), expected, rtol=0, atol=tol)
    torch.testing.assert_close(d, expected @ J_BASE, rtol=0, atol=tol)
    torch.testing.assert_close(d, torch.tensor(tj_value, dtype=torch.float64), rtol=0, atol=1.2e-3)


def _check_zero_rows(name, factor, dtype):
    """K = 1 returns the row; a zero row added to [g1, g2] scales d by ``factor``; all zero gives 0."""
    g = torch.tensor([[3.0, -1.0, 2.0, 0.5]], dtype=dtype)
    torch.testing.assert_close(build(name)(g), g[0])
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    for seed in SEEDS:
        j2 = _jacobian(seed, 2, 7, 2).to(dtype)
        j3 = torch.stack([j2[0], torch.zeros_like(j2[0]), j2[1]])
        d2, d3 = build(name)(j2).double(), build(name)(j3).double()
        assert (d3 - factor * d2).norm() <= tol * j2.double().norm(dim=1).max()
    assert torch.equal(build(name)(torch.zeros(4, 7, dtype=dtype)), torch.zeros(7, dtype=dtype))


def _check_batch_and_scale(agg, at_zero, k=5):
    """[4, K, K] (and [2, 2, K, K]): full rank, rank 2, all zero, one NaN entry; each member as alone (the bad one
    gives the zero-Gramian answer), and G·1e±24 gives G's weights (direct calls need no
    normalisation); float32 in, float32 out."""
    full, low = _gram(0, k, k), _gram(100, k, 2)
    nan = full.clone()
    nan[1, 2] = float("nan")
    out = agg.weights_from_gramian(torch.stack([full, low, torch.zeros(k, k, dtype=torch.float64), nan]))
    assert out.shape == (4, k)
    nested = agg.weights_from_gramian(
        torch.stack([full, low, torch.zeros(k, k, dtype=torch.float64), nan]).view(2, 2, k, k)
    )
    torch.testing.assert_close(nested, out.view(2, 2, k), rtol=0, atol=0)  # any number of batch dimensions
    for i, g in enumerate((full, low)):
        torch.testing.assert_close(out[i], agg.weights_from_gramian(g / g.diagonal().max()), rtol=0, atol=1e-10)
    for i in (2, 3):
        torch.testing.assert_close(out[i], at_zero, rtol=0, atol=0)
    for kk in (4, 20):
        g = _gram(1, kk, kk // 2)
        g = g / g.diagonal().max()
        for scale in (1e-24, 1e24):
            torch.testing.assert_close(
                agg.weights_from_gramian(scale * g), agg.weights_from_gramian(g), rtol=1e-9, atol=1e-12
            )
    assert agg.weights_from_gramian(full.float()).dtype == torch.float32
