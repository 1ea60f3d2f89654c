"""FairGrad (Ban & Ji, ICML 2024, arXiv 2402.15638): the α-fair condition G w = w^(−1/α) (eq. 4)
solved by Newton's method (morl.solvers.alpha_fair) against TorchJD 0.18's ``FairGrad`` (scipy
``least_squares`` from w = 1/K, as the authors' code) and a tight ``least_squares`` run, hand
values, the scaling law, α = 0, and the authors' factor K and clipping.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchjd.aggregation as tj
from scipy.optimize import least_squares

from morl.aggregators import build
from morl.aggregators import fairgrad as fairgrad_module
from tests.jacobians import cases, stationary


def _jacobian(seed, k, d, shared=0.3, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, d, generator=gen, dtype=torch.float64) + shared * torch.randn(
        1, d, generator=gen, dtype=torch.float64
    )
    return j.to(dtype)


def _small_jacobian(seed: int, k: int, dtype=torch.float64) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, 4 * k, generator=gen, dtype=torch.float64) + 0.3 * torch.randn(
        1, 4 * k, generator=gen, dtype=torch.float64
    )
    return j.to(dtype)


def _weights(name, j, **options):
    agg = build(name, **options)
    d = agg(j)
    return agg.weights.double(), d.double()


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_fairgrad_matches_torchjd_and_a_tight_least_squares(alpha, k):
    """TorchJD's FairGrad returns Σ w_k g_k (no factor K, no clipping); ours with max_norm = 0
    returns K Σ w_k g_k, so ours / K is compared. Over seeds 0..4, these α and K:
    ‖d/K − d_tj‖ / ‖d_tj‖ measured ≤ 4.0e-9 (TorchJD stops at scipy's default tolerances 1e-8;
    bound 1e-6); weights against scipy least_squares with tolerances 1e-15: measured ≤ 8.7e-9
    relative (bound 1e-7); residual of eq. (4) ≤ 9.7e-9 (solver tol 1e-8; bound 2e-8)."""
    for seed in range(5):
        j = _jacobian(seed, k, 2 * k + 3)
        w, d = _weights("fairgrad", j, alpha=alpha, max_norm=0.0)
        d_tj = tj.FairGrad(alpha=alpha)(j)
        assert (d / k - d_tj).norm() <= 1e-6 * d_tj.norm(), seed
        gram = (j @ j.T).numpy()
        ref = least_squares(
            lambda x: gram @ x - np.power(x, -1.0 / alpha),
            np.ones(k) / k,
            bounds=(0, np.inf),
            ftol=1e-15,
            xtol=1e-15,
            gtol=1e-15,
        ).x
        assert np.abs(w.numpy() / k - ref).max() <= 1e-7 * np.abs(ref).max(), seed
        # the α-fair condition itself (eq. (4))
        wk = w / k
        assert ((wk.pow(1 / alpha) * ((j @ j.T) @ wk)) - 1).abs().max() <= 2e-8


def test_fairgrad_hand_values_and_scaling_law():
    # G = diag(4, 1), α = 2: 4 w1 = w1^(−1/2) → w1 = 4^(−2/3), w2 = 1; d = K (2 w1, w2) = (4^(1/3), 2)
    j = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    _, d = _weights("fairgrad", j, alpha=2.0, max_norm=0.0)
    assert torch.allclose(d, torch.tensor([4 ** (1 / 3), 2.0], dtype=torch.float64), atol=1e-12)
    # α = 1 is Nash-MTL's condition; FairGrad's d carries the authors' factor K
    j = _jacobian(0, 5, 11)
    assert torch.allclose(
        _weights("fairgrad", j, max_norm=0.0)[0], 5 * _weights("nash_mtl", j, max_norm=0.0)[0], rtol=1e-9
    )
    # α = 0: linear scalarisation, d = K · mean = sum (TorchJD's convention), then clipped
    assert torch.allclose(_weights("fairgrad", j, alpha=0.0, max_norm=0.0)[1], j.sum(0), atol=1e-12)
    # scaling: w ~ s^(−α/(α+1)) for G → sG, so d(aJ) = a^((1−α)/(1+α)) d(J)
    for alpha in (0.5, 1.0, 3.0):
        d1 = _weights("fairgrad", j, alpha=alpha, max_norm=0.0)[1]
        d2 = _weights("fairgrad", 1e3 * j, alpha=alpha, max_norm=0.0)[1]
        assert torch.allclose(d2, 1e3 ** ((1 - alpha) / (1 + alpha)) * d1, rtol=1e-8)


def test_fairgrad_alpha_zero_is_the_clipped_sum():
    """α = 0 weighs every objective alike (the utilitarian end of α-fairness): K · (1/K) = 1
    each, so d = Σ_k g_k, clipped to ‖d‖ ≤ max_norm."""
    j = _small_jacobian(3, 5)
    total = j.sum(0)
    agg = build("fairgrad", alpha=0.0, max_norm=0.0)
    torch.testing.assert_close(agg(j), total, rtol=1e-12, atol=0)
    torch.testing.assert_close(agg.weights, torch.ones(5, dtype=torch.float64), rtol=0, atol=1e-15)
    clipped = build("fairgrad", alpha=0.0, max_norm=0.5)(j)
    torch.testing.assert_close(clipped, 0.5 * total / total.norm(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("name, options", [("fairgrad", {}), ("fairgrad", {"alpha": 2.0})])
def test_stationary_inputs_give_zero_and_others_a_clipped_step(name, options):
    """No bargaining solution exists at a Pareto-stationary J: d = 0 exactly (the disagreement
    point), in both dtypes and at scales 1e-12..1e12; zero rows too. All-positive rows give
    ‖d‖ = max_norm = 1 at every scale when α = 1 (d does not scale with J), 0 < ‖d‖ ≤ 1 else
    (d ~ scale^((1−α)/(1+α)) before clipping: small at 1e12 for α = 2)."""
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        for k in (2, 3, 7, 10, 25):
            for scale in (1e-12, 1.0, 1e12):
                j = stationary(gen, k, 20, max(1, k - 2), scale=scale, dtype=dtype)
                assert torch.equal(build(name, **options)(j), torch.zeros(20, dtype=dtype)), (k, scale)
                positive = (torch.rand(k, 20, generator=gen, dtype=torch.float64) + 0.1).to(dtype) * scale
                norm = build(name, **options)(positive).double().norm()
                if options.get("alpha", 1.0) == 1.0:
                    assert norm == pytest.approx(1.0, rel=1e-5)
                else:
                    assert 0 < norm <= 1 + 1e-5
        j = torch.tensor([[1.0, 2.0], [0.0, 0.0]], dtype=dtype)
        assert torch.equal(build(name, **options)(j), torch.zeros(2, dtype=dtype))


@pytest.mark.parametrize("name, options", [("fairgrad", {}), ("fairgrad", {"alpha": 3.0})])
def test_permutation_invariance_relative_to_the_direction(name, options):
    """d(PJ) = d(J) relative to ‖d‖, over the suite's generated matrices (rank-deficient,
    stationary, spread rows, scales 1e-12..1e12). Measured over generator seeds 0-19: float32
    up to 1.1e-3 (Nash-MTL, FairGrad) and 1.2e-2 (FairGrad α = 3) on rank-2 K = 6 rows, where
    the float32 Gramian's rounding depends on the row order and the α-fair solve amplifies it;
    float64 up to 5.3e-13 over the seed offsets tried (MORL_TEST_SEED_OFFSET). Bounds 4e-2 and 3e-12."""
    gen = torch.Generator().manual_seed(3)
    for dtype, tol in ((torch.float32, 4e-2), (torch.float64, 3e-12)):
        for label, j in cases(gen, dtype, ks=(3, 6, 15)):
            perm = torch.randperm(j.shape[0], generator=gen)
            d = build(name, **options)(j).double()
            dp = build(name, **options)(j[perm]).double()
            assert (dp - d).norm() <= tol * max(d.norm(), 1e-300), label


def test_defaults_and_options_reach_the_solver(monkeypatch):
    name = "fairgrad"
    """(α, max_iter, tol): FairGrad's α is its option (default 1), Nash-MTL's is 1 (Nash
    bargaining is the α = 1 case); max_iter 50 and tol 1e-8 by default."""
    seen = []
    real = fairgrad_module.alpha_fair_solve

    def spy(gram, a, max_iter, tol, init=None):
        seen.append((a, max_iter, tol))
        return real(gram, a, max_iter, tol, init=init)

    monkeypatch.setattr(fairgrad_module, "alpha_fair_solve", spy)
    j = _small_jacobian(0, 4)
    build(name)(j)
    custom = {"max_iter": 7, "tol": 1e-3} | ({"alpha": 2.0} if name == "fairgrad" else {})
    build(name, **custom)(j)
    assert seen == [(1.0, 50, 1e-8), (2.0 if name == "fairgrad" else 1.0, 7, 1e-3)]


@pytest.mark.parametrize(
    "name, options",
    [("nash_mtl", {}), ("fairgrad", {}), ("fairgrad", {"alpha": 0.0})],
    ids=["nash_mtl", "fairgrad", "fairgrad-alpha0"],
)
@pytest.mark.parametrize("batch", [(), (3,)], ids=["one", "batched"])
def test_weights_come_back_in_the_gramians_dtype_and_shape(name, options, batch):
    """Batched: each member's weights (solved and clipped on its own Gramian) equal a call on
    that Gramian alone, to float32 rounding."""
    js = [_small_jacobian(s, 4, torch.float32) for s in range(max(batch, default=1))]
    grams = torch.stack([j @ j.T for j in js]).reshape(*batch, 4, 4)
    w = build(name, **options).weights_from_gramian(grams)
    assert w.dtype == torch.float32 and w.shape == (*batch, 4)
    if batch:
        for i, j in enumerate(js):
            torch.testing.assert_close(w[i], build(name, **options).weights_from_gramian(j @ j.T), rtol=1e-5, atol=0)


def test_bad_options_are_refused():
    for options in [{"alpha": -1.0}, {"max_iter": 0}, {"max_norm": -1.0}]:
        with pytest.raises(ValueError, match=next(iter(options))):
            build("fairgrad", **options)
