"""DualProj (arXiv 2406.16232, Proposition 1; GEM's projection, arXiv 1706.08840, eqs. 10-11)
against TorchJD 0.18 (quadprog on G/tr(G) + reg_eps·I; morl's reg_eps = 1e-4 is the same
problem up to scale, TorchJD's absolute norm_eps set to 0) and against values worked out by hand."""

import pytest
import torch
import torchjd.aggregation as tj
from torchjd._linalg import QuadprogProjector

from morl.aggregators import build
from morl.aggregators import upgrad as upgrad_module  # DualProj's projection call lives in UPGrad's code

SHAPES = [(2, 5, 2), (3, 10, 3), (5, 20, 2), (8, 6, 6), (10, 40, 10), (20, 60, 20), (30, 20, 20), (50, 60, 25)]
J_BASE = torch.tensor([[-4.0, 1.0, 1.0], [6.0, 1.0, 1.0]], dtype=torch.float64)  # G = [[18, −22], [−22, 38]]


def _jacobian(seed, k, d, rank):
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, rank, generator=gen, dtype=torch.float64) @ torch.randn(
        rank, d, generator=gen, dtype=torch.float64
    )
    return j + 0.5 * torch.randn(k, 1, generator=gen, dtype=torch.float64) @ j[:1]  # a shared direction: mixed signs


def _tj(pref=None):
    return tj.DualProj(pref_vector=pref, projector=QuadprogProjector(norm_eps=0.0, reg_eps=1e-4))


def test_dualproj_matches_torchjd():
    """‖d − d_tj‖ / max‖g‖ measured ≤ 2.0e-11 over seeds 0..4 and SHAPES; bound 2e-10."""
    for seed in range(3):
        for k, d, rank in SHAPES:
            j = _jacobian(seed, k, d, rank)
            agg = build("dualproj", reg_eps=1e-4)
            assert float((agg(j) - _tj()(j)).norm() / j.norm(dim=1).max()) <= 2e-10, (seed, k)
            assert int(agg.stats.get("not_converged", torch.tensor(0))) == 0


def test_dualproj_pref_vector_matches_torchjd():
    p = torch.tensor([0.5, 1.0, 2.0, 0.1, 1.5, 0.7], dtype=torch.float64)
    for seed in range(3):
        j = _jacobian(seed, 6, 15, 6)
        ours = build("dualproj", pref_vector=p.tolist(), reg_eps=1e-4)(j)
        assert (ours - _tj(p)(j)).norm() <= 5e-11 * j.norm(dim=1).max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dualproj_hand_computed_values(dtype):
    """The mean (1, 1, 1) conflicts with g1 only (g1·m = −2): π(m) = m + (2/18) g1, weights
    (1/2 + 1/9, 1/2). TorchJD's own test value (reg_eps 1e-4): (0.5563, 1.1109, 1.1109)."""
    agg = build("dualproj")
    d = agg(J_BASE.to(dtype)).double()
    expected = torch.tensor([11 / 18, 1 / 2], dtype=torch.float64)
    tol = 1e-11 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(agg.weights.double(), expected, rtol=0, atol=tol)
    torch.testing.assert_close(d, expected @ J_BASE, rtol=0, atol=tol)
    tj_value = torch.tensor([0.5563, 1.1109, 1.1109], dtype=torch.float64)
    torch.testing.assert_close(build("dualproj", reg_eps=1e-4)(J_BASE), tj_value, rtol=0, atol=1e-4)


def test_dualproj_never_conflicts_with_any_row():
    for seed in range(3):
        for k, d, rank in SHAPES:
            j = _jacobian(seed, k, d, rank)
            assert float((j @ build("dualproj")(j)).min()) >= -1e-10 * float(j.norm(dim=1).max()) ** 2


def test_dualproj_at_a_weakly_stationary_point_projects_the_mean():
    """g1 = −g2, g3 ⟂ both: the mean g3/3 lies in the dual cone {x1 = 0, x2 ≥ 0}: d = g3/3."""
    j = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(
        build("dualproj")(j), torch.tensor([0.0, 1 / 3], dtype=torch.float64), rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dualproj_of_one_row_is_the_row_and_a_zero_row_only_rescales_the_mean(dtype):
    g = torch.tensor([[3.0, -1.0, 2.0, 0.5]], dtype=dtype)
    torch.testing.assert_close(build("dualproj")(g), g[0])
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    for seed in range(3):
        j2 = _jacobian(seed, 2, 7, 2).to(dtype)
        j3 = torch.stack([j2[0], torch.zeros_like(j2[0]), j2[1]])
        d2, d3 = build("dualproj")(j2).double(), build("dualproj")(j3).double()
        assert (d3 - 2 / 3 * d2).norm() <= tol * j2.double().norm(dim=1).max()
    assert torch.equal(build("dualproj")(torch.zeros(4, 7, dtype=dtype)), torch.zeros(7, dtype=dtype))


@pytest.mark.parametrize(
    "options, allowed",
    [
        ({"reg_eps": -1.0}, "a finite number >= 0"),
        ({"max_iter": 0}, "a finite int >= 1"),
        ({"max_iter": 2.5}, "a finite int >= 1"),
        ({"tol": -1e-3}, "a finite number >= 0"),
    ],
)
def test_dualproj_option_errors_name_the_option_and_what_is_allowed(options, allowed):
    ((key, value),) = options.items()
    with pytest.raises(ValueError, match=rf"^DualProj option {key}={value!r} is not valid; allowed: {allowed}$"):
        build("dualproj", **options)


def test_dualproj_preference_errors_name_the_method():
    with pytest.raises(ValueError, match=r"^DualProj option pref_vector=\[1.0, -1.0\] is not valid"):
        build("dualproj", pref_vector=[1.0, -1.0])
    with pytest.raises(ValueError, match=r"^DualProj pref_vector has 2 entries but got K=3"):
        build("dualproj", pref_vector=[1.0, 2.0])(torch.ones(3, 4))


def test_dualproj_options_reach_the_solver(monkeypatch):
    seen = []
    real = upgrad_module.project_to_dual_cone
    monkeypatch.setattr(
        upgrad_module, "project_to_dual_cone", lambda g, u, m, t: seen.append((m, t)) or real(g, u, m, t)
    )
    j = _jacobian(1, 20, 60, 20)
    build("dualproj")(j)
    build("dualproj", max_iter=7, tol=1e-4)(j)
    assert seen == [(100, 1e-10), (7, 1e-4)]
    assert torch.isfinite(build("dualproj", max_iter=1)(j)).all()


@pytest.mark.parametrize("k", [5, 12])
def test_dualproj_weights_of_a_batch_of_gramians_use_each_members_own_trace(k):
    grams = torch.stack(
        [(j := _jacobian(s, k, 3 * k, k)) @ j.T * scale for s, scale in zip(range(3), (1.0, 1e3, 1e-3))]
    )
    batched = build("dualproj", reg_eps=1e-2).weights_from_gramian(grams)
    for member, gram in enumerate(grams):
        alone = build("dualproj", reg_eps=1e-2).weights_from_gramian(gram)
        assert (batched[member] - alone).abs().max() <= 1e-12 * alone.abs().max(), member
    assert build("dualproj").weights_from_gramian(grams[0].float()).dtype == torch.float32
