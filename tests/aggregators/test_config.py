"""ConFIG (Liu, Chu & Thuerey, arXiv 2408.11104, eq. 2) against TorchJD 0.18's ConFIG (pinv of the
K×D unit rows; morl works on the equilibrated Gramian), hand-computed values and the paper's
conflict-free claim (and where it fails)."""

import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build
from tests.aggregators.projection_checks import (
    R18,
    R38,
    SEEDS,
    _check_batch_and_scale,
    _check_hand_values,
    _check_zero_rows,
    _gram,
    _jacobian,
    _worst_against,
)


def test_config_matches_torchjd():
    """Measured ≤ 1.2e-12 over seeds 0..4; bound 1e-10."""
    assert _worst_against("config", {}, tj.ConFIG()) <= 1e-10


def test_config_pref_vector_matches_torchjd_and_its_scale_cancels():
    p = torch.tensor([0.5, 1.0, 2.0, 0.1, 1.5, 0.7], dtype=torch.float64)
    for seed in SEEDS:
        j = _jacobian(seed, 6, 15, 6)
        tol = 5e-11 * j.norm(dim=1).max()
        assert (build("config", pref_vector=p.tolist())(j) - tj.ConFIG(pref_vector=p)(j)).norm() <= tol
        assert (build("config", pref_vector=(7 * p).tolist())(j) - tj.ConFIG(pref_vector=p)(j)).norm() <= tol
        assert (build("config")(j) - tj.ConFIG(pref_vector=torch.ones(6, dtype=torch.float64))(j)).norm() <= tol


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_config_of_opposite_rows_is_zero_the_limit_of_nearly_opposite_ones(dtype):
    """g₂ = −c·g₁: no direction has equal cosines with both, U⁺w = 0 (TorchJD returns its rounding,
    ≤ 1e-7·‖g‖). With g₂ turned by ε out of line, the equal-cosine direction is nearly ⟂ g₁ and
    d = O(ε): the zero is the limit."""
    g1 = torch.tensor([3.0, -1.0, 2.0, 0.5, 1.0], dtype=torch.float64)
    for c in (0.5, 1.0, 3.0, 367 * 0.0371):  # the last: wᵀ(UUᵀ)⁺w rounds to +2.9e-17·‖w‖², not 0
        j = torch.stack([g1, -c * g1]).to(dtype)
        assert torch.equal(build("config")(j), torch.zeros(5, dtype=dtype))
        assert torch.equal(build("config", pref_vector=[1e6, 1e6])(j), torch.zeros(5, dtype=dtype))  # w's scale
        assert tj.ConFIG()(j.double()).norm() <= 1e-7 * g1.norm() * max(c, 1.0)
    v = torch.tensor([1.0, 3.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    v = v - (v @ g1) / (g1 @ g1) * g1
    for eps in (1e-2, 1e-4):
        j = torch.stack([g1, -2.0 * g1 + eps * v])
        d = build("config")(j)
        torch.testing.assert_close(d, tj.ConFIG()(j), rtol=0, atol=1e-9)
        assert d.norm() <= 10 * eps * v.norm()


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
