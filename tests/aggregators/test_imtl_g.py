"""IMTL-G (Liu et al., ICLR 2021, Sec. 3.2): α = G⁺n / 1ᵀG⁺n, against TorchJD 0.18's IMTLG (the
same formula and pinv cutoff K ε λ_max), hand-computed values and the paper's defining property."""

import math

import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build
from morl.aggregators.imtl_g import imtl_g_weights

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


def test_imtl_g_matches_torchjd():
    """Measured ≤ 5.7e-12 over seeds 0..4; bound 1e-10."""
    assert _worst_against("imtl_g", {}, tj.IMTLG()) <= 1e-10


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_imtl_g_hand_computed_values(dtype):
    """G⁻¹n ∝ (38√18 + 22√38, 22√18 + 18√38), normalised to sum 1; TorchJD's value (0.0767, 1, 1)."""
    expected = torch.tensor([19 * R18 + 11 * R38, 11 * R18 + 9 * R38], dtype=torch.float64) / (30 * R18 + 20 * R38)
    _check_hand_values("imtl_g", expected, [0.0767, 1.0, 1.0], dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_imtl_g_ignores_zero_rows(dtype):
    _check_zero_rows("imtl_g", 1.0, dtype)


def test_imtl_g_weights_of_a_batch_are_each_members_and_scale_free():
    _check_batch_and_scale(build("imtl_g"), torch.zeros(5, dtype=torch.float64))


def test_imtl_g_projections_on_the_unit_gradients_are_equal():
    """IMTL-G's defining condition d·g_k/‖g_k‖ = const with Σα = 1 (full row rank, K ≤ D)."""
    for seed in SEEDS:
        for k, d in ((2, 5), (4, 9), (7, 7)):
            j = _jacobian(seed, k, d, k)
            agg = build("imtl_g")
            proj = (j @ agg(j)) / j.norm(dim=1)
            assert float(proj.max() - proj.min()) <= 1e-10 * float(j.norm(dim=1).max())
            assert abs(float(agg.weights.sum()) - 1.0) <= 1e-12


def test_imtl_g_can_conflict_with_every_objective():
    """1ᵀG⁻¹n < 0 makes the common projection negative: −d raises every loss. Why imtl_g has
    no non_conflicting flag (the paper claims none)."""
    j = torch.tensor([[1.40, 0.26, -0.58], [0.75, 2.66, 0.78], [0.76, 1.71, 0.48]], dtype=torch.float64)
    proj = (j @ build("imtl_g")(j)) / j.norm(dim=1)
    torch.testing.assert_close(proj, torch.full((3,), float(proj[0]), dtype=torch.float64), rtol=1e-10, atol=0)
    assert float(proj[0]) < -0.38


def _degenerate_imtl_g_rows(rho_low=0.6, rho_high=0.65) -> torch.Tensor:
    """Three rows in the plane, g_1 = (1, 0), g_2 at angle 2.5, g_3 = ρ at angle 4.5, with ρ
    bisected (float64, 80 halvings) to the root of 1ᵀG⁺n, where IMTL-G's normalisation has
    nothing to divide by (the sum changes sign between ρ = 0.6 and 0.65)."""

    def rows(rho):
        angles = torch.tensor([0.0, 2.5, 4.5], dtype=torch.float64)
        radii = torch.tensor([1.0, 1.0, rho], dtype=torch.float64)
        return torch.stack([radii * angles.cos(), radii * angles.sin()], dim=1)

    def total(rho):
        g = rows(rho) @ rows(rho).T
        return float((torch.linalg.pinv(g, hermitian=True) @ g.diagonal().sqrt()).sum())

    assert total(rho_low) > 0 > total(rho_high)
    for _ in range(80):
        mid = 0.5 * (rho_low + rho_high)
        rho_low, rho_high = (mid, rho_high) if total(mid) > 0 else (rho_low, mid)
    return rows(rho_low)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_imtl_g_without_a_normalisation_gives_no_step(dtype):
    """Σ_k (G⁺n)_k = 0 up to rounding leaves α = G⁺n / 1ᵀG⁺n undefined, even in sign: IMTL-G
    returns weights 0 and d = 0 (TorchJD: the same in float64, by an absolute 1e-12 guard),
    not Σ g_k (the rows here do not cancel: ‖Σ g_k‖ ≈ 0.069). The guard is relative: 1e-12
    of Σ|G⁺n| in float64, K ε₃₂ in float32, where this sum computes as 2.4e-8 of Σ|G⁺n| and
    the weights would otherwise come out near 1e7."""
    j = _degenerate_imtl_g_rows()
    assert float(j.sum(0).norm()) > 0.06
    agg = build("imtl_g")
    d = agg(j.to(dtype))
    torch.testing.assert_close(agg.weights, torch.zeros(3, dtype=dtype), rtol=0, atol=0)
    torch.testing.assert_close(d, torch.zeros(2, dtype=dtype), rtol=0, atol=0)
    if dtype == torch.float64:
        torch.testing.assert_close(tj.IMTLG()(j), torch.zeros(2, dtype=dtype), rtol=0, atol=0)
    batched = imtl_g_weights(torch.stack([j @ j.T] * 2).to(dtype))  # the torch path
    torch.testing.assert_close(batched, torch.zeros(2, 3, dtype=torch.float64), rtol=0, atol=0)


def test_imtl_g_guards_each_member_of_a_batch_on_its_own():
    """The degenerate-sum guard compares each Gramian's Σ(G⁺n) with its own Σ|G⁺n|: a regular
    member at scale 1e30 (its G⁺n ~1e-15) next to the degenerate one keeps its weights."""
    deg = _degenerate_imtl_g_rows()
    regular = torch.tensor([[1.0, 0.2], [0.3, 1.0], [-0.5, 0.8]], dtype=torch.float64)
    grams = torch.stack([deg @ deg.T, 1e30 * (regular @ regular.T)])
    out = imtl_g_weights(grams)
    torch.testing.assert_close(out[0], torch.zeros(3, dtype=torch.float64), rtol=0, atol=0)
    torch.testing.assert_close(out[1], imtl_g_weights(regular @ regular.T), rtol=1e-10, atol=0)
    assert out[1].abs().sum() > 0.5
