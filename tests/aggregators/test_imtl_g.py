"""IMTL-G (Liu et al., ICLR 2021, Sec. 3.2): α = G⁺n / 1ᵀG⁺n, against TorchJD 0.18's IMTLG (the
same formula and pinv cutoff K ε λ_max), hand-computed values and the paper's defining property."""

import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build
from morl.aggregators.imtl_g import imtl_g_weights
from tests.aggregators.projection_checks import (
    R18,
    R38,
    SEEDS,
    _check_batch_and_scale,
    _check_hand_values,
    _check_zero_rows,
    _jacobian,
    _worst_against,
)


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
