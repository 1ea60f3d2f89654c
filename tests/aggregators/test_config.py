"""ConFIG (Liu, Chu & Thuerey, arXiv 2408.11104, eq. 2) against TorchJD 0.18's ConFIG (pinv of the
K×D unit rows; morl works on the equilibrated Gramian), hand-computed values and the paper's
conflict-free claim (and where it fails)."""

import math

import pytest
import torch
import torchjd.aggregation as tj

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
    """[4, K, K]: full rank, rank 2, all zero, one NaN entry; each member as alone (the bad one
    gives the zero-Gramian answer), and G·1e±24 gives G's weights (direct calls need no
    normalisation); float32 in, float32 out."""
    full, low = _gram(0, k, k), _gram(100, k, 2)
    nan = full.clone()
    nan[1, 2] = float("nan")
    out = agg.weights_from_gramian(torch.stack([full, low, torch.zeros(k, k, dtype=torch.float64), nan]))
    assert out.shape == (4, k)
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


def test_config_matches_torchjd():
    """Measured ≤ 1.2e-12 over seeds 0..4; bound 1e-10."""
    assert _worst_against("config", {}, tj.ConFIG()) <= 1e-10


def test_config_pref_vector_matches_torchjd():
    p = torch.tensor([0.5, 1.0, 2.0, 0.1, 1.5, 0.7], dtype=torch.float64)
    for seed in SEEDS:
        j = _jacobian(seed, 6, 15, 6)
        assert (build("config", pref_vector=p.tolist())(j) - tj.ConFIG(pref_vector=p)(j)).norm() <= 5e-11 * j.norm(
            dim=1
        ).max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_config_hand_computed_values(dtype):
    """The unit rows have equal projections on u = (u1 + u2)/‖u1 + u2‖; Σ g_i·u u = ½(√18 + √38)(u1 + u2)."""
    expected = 0.5 * (R18 + R38) * torch.tensor([1 / R18, 1 / R38], dtype=torch.float64)
    _check_hand_values("config", expected, [0.1588, 2.0706, 2.0706], dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_config_ignores_zero_rows(dtype):
    _check_zero_rows("config", 1.0, dtype)


def test_config_weights_of_a_batch_are_each_members_and_scale_free():
    _check_batch_and_scale(build("config"), torch.zeros(5, dtype=torch.float64))


def test_config_option_errors_name_the_method_and_the_option():
    with pytest.raises(ValueError, match=r"^ConFIG option pref_vector=\[0.0, 0.0\] is not valid"):
        build("config", pref_vector=[0.0, 0.0])
    with pytest.raises(ValueError, match=r"^ConFIG pref_vector has 2 entries but got K=3"):
        build("config", pref_vector=[1.0, 2.0])(torch.ones(3, 4))


@pytest.mark.parametrize("seed", range(10))
def test_config_cuts_the_rounding_of_a_float32_gramian(seed):
    """A rank-2 G rounded to float32 has eigenvalues of UUᵀ of order ε₃₂ where the exact ones
    are 0. ConFIG's pinv cuts below K ε₃₂ λ_max (as TorchJD's float32 pinv); the rounding
    perturbs an eigenvalue by at most ‖E‖₂ ≤ K ε₃₂/2 · max|UUᵀ| (below the cut), so the float32
    weights equal the float64 ones to float32 accuracy (measured over seeds 0..9: ≤ 2.2e-7 relative
    to max|w|; bound 1e-4). Keeping those eigenvalues (float64's cut) inflates the weights by
    ~1/ε₃₂."""
    g = _gram(seed, 5, 2)
    g = g / g.diagonal().max()
    agg = build("config")
    exact = agg.weights_from_gramian(g)
    rounded = agg.weights_from_gramian(g.float()).double()
    assert (rounded - exact).abs().max() <= 1e-4 * exact.abs().max()


def test_config_is_conflict_free_for_independent_rows_only():
    """Independent rows: every unit gradient has the same positive projection on d (the
    paper's claim). K > D: U⁺1 is a least-squares inverse and d conflicts with rows 2 and 3."""
    for seed in SEEDS:
        j = _jacobian(seed, 5, 12, 5)
        proj = (j @ build("config")(j)) / j.norm(dim=1)
        assert float(proj.min()) > 0 and float(proj.max() - proj.min()) <= 1e-10 * float(j.norm(dim=1).max())
    j = torch.tensor([[-0.90, -0.56], [0.69, 0.22], [-0.67, 0.68], [0.57, -0.58]], dtype=torch.float64)
    proj = (j @ build("config")(j)) / j.norm(dim=1)
    assert float(proj[1]) < -0.03 and float(proj[2]) < -0.15
