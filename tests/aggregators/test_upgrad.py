"""UPGrad (arXiv 2406.16232, eq. 5) against TorchJD 0.18 (a peer implementation: quadprog on
G/tr(G) + reg_eps·I) and against values worked out by hand.

morl's ``reg_eps`` adds reg_eps·tr(G) to G's diagonal, the same problem as TorchJD's up to
scale, so ``reg_eps=1e-4`` reproduces TorchJD's default; TorchJD's ``norm_eps`` (zeros when
tr(G) < 1e-4, absolute) is not mapped: morl is scale-free, so TorchJD runs with norm_eps = 0.
"""

import warnings

import pytest
import torch
import torchjd.aggregation as tj
from torchjd._linalg import QuadprogProjector

from morl.aggregators import build
from morl.aggregators import upgrad as upgrad_module
from morl.solvers import dual_cone as dc

# (K, D, rank): full rank, rank-deficient, K > D, and K up to 50 (the iterative QP solver)
SHAPES = [(2, 5, 2), (3, 10, 3), (5, 20, 2), (8, 6, 6), (10, 40, 10), (20, 60, 20), (30, 20, 20), (50, 60, 25)]
J_BASE = torch.tensor([[-4.0, 1.0, 1.0], [6.0, 1.0, 1.0]], dtype=torch.float64)  # G = [[18, −22], [−22, 38]]


def _jacobian(seed, k, d, rank):
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, rank, generator=gen, dtype=torch.float64) @ torch.randn(
        rank, d, generator=gen, dtype=torch.float64
    )
    return j + 0.5 * torch.randn(k, 1, generator=gen, dtype=torch.float64) @ j[:1]  # a shared direction: mixed signs


def _tj(pref=None):
    return tj.UPGrad(pref_vector=pref, projector=QuadprogProjector(norm_eps=0.0, reg_eps=1e-4))


def test_upgrad_matches_torchjd():
    """‖d − d_tj‖ / max‖g‖ measured ≤ 1.9e-11 over seeds 0..4 and SHAPES; bound 2e-10. No
    K > 10 call leaves a QP unconverged."""
    for seed in range(3):
        for k, d, rank in SHAPES:
            j = _jacobian(seed, k, d, rank)
            agg = build("upgrad", reg_eps=1e-4)
            assert float((agg(j) - _tj()(j)).norm() / j.norm(dim=1).max()) <= 2e-10, (seed, k)
            assert int(agg.stats.get("not_converged", torch.tensor(0))) == 0


def test_upgrad_pref_vector_matches_torchjd():
    """Measured over seeds 0..4: ‖d − d_tj‖ / max‖g‖ ≤ 3.4e-12; bound 5e-11."""
    p = torch.tensor([0.5, 1.0, 2.0, 0.1, 1.5, 0.7], dtype=torch.float64)
    for seed in range(3):
        j = _jacobian(seed, 6, 15, 6)
        ours = build("upgrad", pref_vector=p.tolist(), reg_eps=1e-4)(j)
        assert (ours - _tj(p)(j)).norm() <= 5e-11 * j.norm(dim=1).max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_upgrad_hand_computed_values(dtype):
    """π(g1) = g1 + (22/38) g2, π(g2) = g2 + (22/18) g1 (each conflicts only with the other);
    d = ½(π1 + π2): weights (10/9, 15/19). TorchJD's own test value for this J (with its
    reg_eps 1e-4) is (0.2929, 1.9004, 1.9004)."""
    agg = build("upgrad")
    d = agg(J_BASE.to(dtype)).double()
    expected = torch.tensor([10 / 9, 15 / 19], dtype=torch.float64)
    tol = 1e-11 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(agg.weights.double(), expected, rtol=0, atol=tol)
    torch.testing.assert_close(d, expected @ J_BASE, rtol=0, atol=tol)
    tj_value = torch.tensor([0.2929, 1.9004, 1.9004], dtype=torch.float64)
    torch.testing.assert_close(build("upgrad", reg_eps=1e-4)(J_BASE), tj_value, rtol=0, atol=1e-4)


def test_upgrad_never_conflicts_with_any_row():
    """g_k·d ≥ 0 for every row (up to the 1e-12 ridge), on conflicting rows of any rank."""
    for seed in range(3):
        for k, d, rank in SHAPES:
            j = _jacobian(seed, k, d, rank)
            out = build("upgrad")(j)
            assert float((j @ out).min()) >= -1e-10 * float(j.norm(dim=1).max()) ** 2


def test_upgrad_is_not_zero_at_a_weakly_stationary_point():
    """g1 = −g2 and g3 ⟂ both: the dual cone is {x1 = 0, x2 ≥ 0}, π(g1) = π(g2) = 0 and
    π(g3) = g3, so UPGrad returns g3/3 (MGDA returns 0)."""
    j = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(build("upgrad")(j), torch.tensor([0.0, 1 / 3], dtype=torch.float64), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_upgrad_of_one_row_is_the_row_and_a_zero_row_only_rescales_the_mean(dtype):
    """K = 1 returns g; adding a zero row to [g1, g2] keeps the cone and averages over 3: d₃ = ⅔ d₂."""
    g = torch.tensor([[3.0, -1.0, 2.0, 0.5]], dtype=dtype)
    torch.testing.assert_close(build("upgrad")(g), g[0])
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    for seed in range(3):
        j2 = _jacobian(seed, 2, 7, 2).to(dtype)
        j3 = torch.stack([j2[0], torch.zeros_like(j2[0]), j2[1]])
        d2, d3 = build("upgrad")(j2).double(), build("upgrad")(j3).double()
        assert (d3 - 2 / 3 * d2).norm() <= tol * j2.double().norm(dim=1).max()
    assert torch.equal(build("upgrad")(torch.zeros(4, 7, dtype=dtype)), torch.zeros(7, dtype=dtype))


@pytest.mark.parametrize(
    "options, allowed",
    [
        ({"reg_eps": -1.0}, "a finite number >= 0"),
        ({"max_iter": 0}, "a finite int >= 1"),
        ({"max_iter": 2.5}, "a finite int >= 1"),
        ({"tol": -1e-3}, "a finite number >= 0"),
    ],
)
def test_upgrad_option_errors_name_the_option_and_what_is_allowed(options, allowed):
    ((key, value),) = options.items()
    with pytest.raises(ValueError, match=rf"^UPGrad option {key}={value!r} is not valid; allowed: {allowed}$"):
        build("upgrad", **options)


def test_upgrad_preference_errors_name_the_method():
    with pytest.raises(ValueError, match=r"^UPGrad option pref_vector=\[1.0, -1.0\] is not valid"):
        build("upgrad", pref_vector=[1.0, -1.0])
    with pytest.raises(ValueError, match=r"^UPGrad pref_vector has 2 entries but got K=3"):
        build("upgrad", pref_vector=[1.0, 2.0])(torch.ones(3, 4))


def test_upgrad_options_reach_the_solver(monkeypatch):
    """max_iter 100 and tol 1e-10 by default, the user's values otherwise; max_iter = 1 is valid."""
    seen = []
    real = upgrad_module.project_to_dual_cone
    monkeypatch.setattr(
        upgrad_module, "project_to_dual_cone", lambda g, u, m, t: seen.append((m, t)) or real(g, u, m, t)
    )
    j = _jacobian(1, 20, 60, 20)
    build("upgrad")(j)
    build("upgrad", max_iter=7, tol=1e-4)(j)
    assert seen == [(100, 1e-10), (7, 1e-4)]
    assert torch.isfinite(build("upgrad", max_iter=1)(j)).all()


@pytest.mark.parametrize("k", [5, 12])
def test_upgrad_weights_of_a_batch_of_gramians_use_each_members_own_trace(k):
    """``weights_from_gramian`` on [3, K, K] at scales 1, 1e3, 1e-3 with reg_eps = 1e-2 (the
    ridge is reg_eps times each member's own trace) equals each member alone, in its dtype."""
    grams = torch.stack(
        [(j := _jacobian(s, k, 3 * k, k)) @ j.T * scale for s, scale in zip(range(3), (1.0, 1e3, 1e-3))]
    )
    batched = build("upgrad", reg_eps=1e-2).weights_from_gramian(grams)
    for member, gram in enumerate(grams):
        alone = build("upgrad", reg_eps=1e-2).weights_from_gramian(gram)
        assert (batched[member] - alone).abs().max() <= 1e-12 * alone.abs().max(), member
    assert build("upgrad").weights_from_gramian(grams[0].float()).dtype == torch.float32


@pytest.mark.parametrize("name, k, rhs", [("upgrad", 12, 12), ("dualproj", 12, 1)])
def test_a_call_that_may_take_over_five_seconds_warns_once(name, k, rhs, monkeypatch):
    """The first call whose cost estimate (K/2 active-set steps of B masked K×K solves, B
    right-hand sides) exceeds ~5 s warns, naming the method, K and the expected seconds; calls
    before it (small K) and after it do not. STEP_SECONDS is raised so one K = 12 step takes 1 s:
    1.5 to 6 s; at the real one K = 12 is silent."""
    j = torch.randn(k, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(name)(j)
    monkeypatch.setattr(dc, "STEP_SECONDS", 1.0 / (rhs * k**3))
    agg = build(name)
    owner = {"upgrad": "UPGrad", "dualproj": "DualProj"}[name]
    with pytest.warns(UserWarning, match=rf"^{owner} with K={k} objectives: .* expect 1.5 to 6 s per call$") as caught:
        agg(j[:3])
        agg(j)
        agg(j)
    assert len([w for w in caught if issubclass(w.category, UserWarning)]) == 1
