"""Aligned-MTL (Senushkin et al., arXiv 2305.19000, Alg. 1) against TorchJD 0.18's AlignedMTL
(pref 1/K; TorchJD slices the kept eigenpairs, morl masks them), a hand-computed G^{-1/2} and
Alg. 1's balancing property."""

import math

import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build
from tests.aggregators.projection_checks import (
    J_BASE,
    SEEDS,
    _check_batch_and_scale,
    _check_hand_values,
    _check_zero_rows,
    _jacobian,
    _worst_against,
)


@pytest.mark.parametrize("mode, bound", [("min", 1e-11), ("median", 5e-10), ("rmse", 5e-10)])
def test_aligned_mtl_matches_torchjd(mode, bound):
    """Measured over seeds 0..4: 7.9e-14 (min), 3.4e-11 (median), 4.9e-11 (rmse)."""
    assert _worst_against("aligned_mtl", {"scale_mode": mode}, tj.AlignedMTL(scale_mode=mode)) <= bound


def test_aligned_mtl_pref_vector_matches_torchjd():
    p = torch.tensor([0.5, 1.0, 2.0, 0.1, 1.5, 0.7], dtype=torch.float64)
    for seed in SEEDS:
        j = _jacobian(seed, 6, 15, 6)
        assert (
            build("aligned_mtl", pref_vector=p.tolist())(j) - tj.AlignedMTL(pref_vector=p)(j)
        ).norm() <= 5e-11 * j.norm(dim=1).max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_aligned_mtl_hand_computed_values(dtype):
    """B = sqrt(λ_min) G^{-1/2}; for a 2×2 SPD G, G^{1/2} = (G + sqrt(det) I) / sqrt(tr + 2 sqrt(det))."""
    g = J_BASE @ J_BASE.T
    tr, det = 56.0, 200.0
    lam_min = (tr - math.sqrt(tr * tr - 4 * det)) / 2
    root = (g + math.sqrt(det) * torch.eye(2, dtype=torch.float64)) / math.sqrt(tr + 2 * math.sqrt(det))
    expected = math.sqrt(lam_min) * torch.linalg.inv(root) @ torch.full((2,), 0.5, dtype=torch.float64)
    _check_hand_values("aligned_mtl", expected, [0.2133, 0.9673, 0.9673], dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_aligned_mtl_zero_row_keeps_the_components_and_averages_over_k(dtype):
    _check_zero_rows("aligned_mtl", 2 / 3, dtype)


@pytest.mark.parametrize("mode", ["min", "median", "rmse"])
def test_aligned_mtl_weights_of_a_batch_are_each_members_and_scale_free(mode):
    """A zero (or non-finite) Gramian gives B = I: the preference."""
    _check_batch_and_scale(build("aligned_mtl", scale_mode=mode), torch.full((5,), 0.2, dtype=torch.float64))


def test_aligned_mtl_option_errors_name_the_method_and_the_option():
    with pytest.raises(ValueError, match=r"^AlignedMTL option scale_mode='max' is not valid"):
        build("aligned_mtl", scale_mode="max")
    with pytest.raises(ValueError, match=r"^AlignedMTL option pref_vector=\[-1.0\] is not valid"):
        build("aligned_mtl", pref_vector=[-1.0])
    with pytest.raises(ValueError, match=r"^AlignedMTL pref_vector has 2 entries but got K=3"):
        build("aligned_mtl", pref_vector=[1.0, 2.0])(torch.ones(3, 4))


def test_aligned_mtl_balances_the_singular_values():
    """Alg. 1's purpose: BJ has all singular values √λ_min, i.e. B G B = λ_min·P (P the
    projector on the kept eigenvectors; I for full rank)."""
    from morl.aggregators.aligned_mtl import balance_transformation

    for seed in SEEDS:
        for k, d, rank in ((3, 8, 3), (6, 20, 6), (6, 20, 3)):
            j = _jacobian(seed, k, d, rank)
            g = j @ j.T
            lam, vec = torch.linalg.eigh(g)
            kept = vec[:, lam > lam[-1] * k * torch.finfo(torch.float64).eps]
            b = balance_transformation(g)
            expected = float(lam[lam > lam[-1] * k * torch.finfo(torch.float64).eps].min()) * kept @ kept.T
            torch.testing.assert_close(b @ g @ b, expected, rtol=0, atol=1e-9 * float(lam[-1]))
