"""PCD (Priority-Constrained Descent, arXiv 2606.29521) against a transcription of its QP solved
by enumerating working sets on the gradient vectors (the paper's reference method, Appendix B.2,
with SVD projections: no Gramian, no active-set logic), against TorchJD 0.18's ``PCD``, and its
special cases, state and options."""

from __future__ import annotations

import itertools
import math
import warnings

import pytest
import torch

import morl.aggregators.pcd as pcd
from morl.aggregators import build

TAU, BETA, EPS = 0.02, 0.999, 1e-8


def reference_direction(rows: torch.Tensor, history: list[torch.Tensor], taus: list[float]) -> torch.Tensor:
    """PCD's direction for ``rows`` (float64 [K, D]) after the calls in ``history`` (their
    [K] squared norms, this call's last), from its definition: the projection of g̃₁ onto
    {d : g̃_jᵀd ≥ τ_j‖g̃_j‖²} is, among the projections onto the affine sets of each working
    set W, the feasible one closest to g̃₁."""
    ema = torch.zeros(rows.shape[0], dtype=torch.float64)
    for sq in history:
        ema = BETA * ema + (1 - BETA) * sq
    scales = 1 / torch.sqrt(ema / (1 - BETA ** len(history)) + EPS)
    g = rows * scales.unsqueeze(1)
    primary, secondary = g[0], g[1:]
    bounds = torch.tensor(taus, dtype=torch.float64) * secondary.square().sum(1)
    size = g.square().sum(1).max().item()
    best = None
    for r in range(secondary.shape[0] + 1):
        for w in itertools.combinations(range(secondary.shape[0]), r):
            d = primary.clone()
            if w:
                rows_w = secondary[list(w)]
                d = primary - torch.linalg.pinv(rows_w) @ (rows_w @ primary - bounds[list(w)])
                if (rows_w @ d - bounds[list(w)]).abs().max() > 1e-9 * size:
                    continue  # W's equalities have no solution
            if (secondary @ d - bounds).min() < -1e-9 * size:
                continue
            if best is None or (d - primary).norm() < (best - primary).norm():
                best = d
    if best is None:  # no d meets every constraint: the primary gradient
        return rows[0].clone()
    if best.norm() <= 1e-7 * primary.norm():
        return torch.zeros_like(rows[0])
    return best * (rows[0].norm() / best.norm())


def _problem(seed: int, k: int, rank: int, d: int = 12) -> torch.Tensor:
    """[K, D] float64 of the given rank, row norms within 0.3..3, secondaries pushed against the
    primary on odd seeds (many active constraints)."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(k, rank, generator=g, dtype=torch.float64) @ torch.randn(
        rank, d, generator=g, dtype=torch.float64
    )
    rows = rows / rows.norm(dim=1, keepdim=True) * (0.3 + 2.7 * torch.rand(k, 1, generator=g, dtype=torch.float64))
    if seed % 2:
        rows[1:] -= 0.8 * rows[0] * rows[1:].norm(dim=1, keepdim=True) / rows[0].norm()
    return rows


@pytest.mark.parametrize("tau", [TAU, 0.3])
@pytest.mark.parametrize("k", [2, 3, 6])
def test_pcd_direction_is_the_projection_of_its_definition(k, tau):
    # full rank and rank-deficient (dependent secondaries: infeasible or degenerate problems),
    # three calls each so the moving average moves; 9 seeds. Measured worst: 2.3e-12.
    worst = 0.0
    for seed in range(9):
        rank = [k, max(1, k - 2), 2][seed % 3]
        agg, history = build("pcd", tau=tau), []
        for call in range(3):
            rows = _problem(100 * seed + call, k, rank)
            history.append(rows.square().sum(1))
            expected = reference_direction(rows, history, [tau] * (k - 1))
            worst = max(worst, ((agg(rows) - expected).norm() / rows[0].norm()).item())
    assert worst < 1e-8


def _torchjd():
    return pytest.importorskip("torchjd.aggregation")


@pytest.mark.parametrize("dtype,bound", [(torch.float64, 1e-9), (torch.float32, 2e-5)])
@pytest.mark.parametrize("k", [2, 5, 20])
def test_pcd_matches_torchjd(k, dtype, bound):
    # full-rank conflicting rows (D = 64) over 4 seeds and 3 calls. Measured worst: float64
    # 2.2e-13, float32 4.9e-7 (both solve in float64 on a float32 Gramian; the bound leaves
    # 40x for another CPU's rounding of it, and a wrong active set costs O(1)).
    tj = _torchjd()
    worst = 0.0
    for seed in range(4):
        ours, theirs = build("pcd"), tj.PCD()
        for call in range(3):
            rows = _problem(1000 * seed + call, k, k, d=64).to(dtype)
            worst = max(worst, ((ours(rows) - theirs(rows)).norm() / rows[0].norm()).item())
    assert worst < bound


def test_a_zero_primary_gradient_gives_zero():
    rows = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 0.0], [0.0, -1.0, 1.0]], dtype=torch.float64)
    agg = build("pcd")
    assert torch.equal(agg(rows), torch.zeros(3, dtype=torch.float64))
    assert torch.equal(agg.weights, torch.zeros(3, dtype=torch.float64))


@pytest.mark.parametrize("k", [3, 20])
def test_infeasible_constraints_are_dropped(k):
    # two opposite secondary gradients cannot both gain τ‖g̃‖² > 0: d = g₁ exactly
    g = torch.Generator().manual_seed(0)
    rows = torch.randn(k, 30, generator=g, dtype=torch.float64)
    rows[2] = -3.0 * rows[1]
    agg = build("pcd")
    assert torch.equal(agg(rows), rows[0])


def test_a_zero_projection_gives_zero_and_tau_zero_keeps_a_free_primary():
    # τ = 0 with g₂ = −g₁: the projection of g̃₁ onto {g̃₂ᵀd ≥ 0} is 0
    rows = torch.tensor([[1.0, 2.0, -1.0], [-2.0, -4.0, 2.0]], dtype=torch.float64)
    assert torch.equal(build("pcd", tau=0.0)(rows), torch.zeros(3, dtype=torch.float64))
    # a secondary gradient that already gains more than τ: its constraint is inactive, d = g₁
    rows = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(build("pcd", tau=0.2)(rows), rows[0], rtol=0, atol=1e-15)
    # one objective: d = g₁, nothing to solve (so nothing unfinished)
    single = build("pcd")
    assert torch.allclose(single(rows[:1]), rows[0], rtol=0, atol=1e-15)
    assert int(single.stats.get("not_converged", torch.zeros((), dtype=torch.int64))) == 0


@pytest.mark.parametrize("factor,nonzero", [(6.0, True), (2.0, False)])
def test_the_zero_direction_threshold_is_ten_ulps_of_the_squared_magnitude(factor, nonzero):
    # τ = 0, g₁ = e₁, g₂ = (−1, δ): d̃ = g̃₁ projected onto {g̃₂ᵀd ≥ 0}, ‖d̃‖² = δ²/(1 + δ²)
    # (first call: both rows normalised to ~1), w̃ = [1, 1/‖g̃₂‖] so (Σ|w̃_i|‖g̃_i‖)² = 4:
    # d is zero exactly when ‖d̃‖² ≤ 10ε · 4. δ puts ‖d̃‖² at ``factor`` × 10ε.
    precision = 10 * torch.finfo(torch.float64).eps
    delta = math.sqrt(factor * precision)
    rows = torch.tensor([[1.0, 0.0], [-1.0, delta]], dtype=torch.float64)
    out = build("pcd", tau=0.0)(rows)
    assert bool((out != 0).any()) == nonzero


def test_a_row_that_was_always_zero_gets_scale_zero_with_eps_zero():
    # v̂ + ε = 0: its constraint 0 ≥ 0 holds, and its scale is 0 (not a division by zero)
    rows = torch.tensor([[1.0, 2.0], [0.0, 0.0], [-1.0, 0.5]], dtype=torch.float64)
    out = build("pcd", eps=0.0, tau=0.1)(rows)
    expected = build("pcd", eps=0.0, tau=0.1)(rows[[0, 2]])
    assert torch.allclose(out, expected, rtol=0, atol=1e-15)


def test_the_secondary_gets_exactly_its_share_when_it_conflicts():
    # g₁ = e₁, g₂ = (−1, 1)/√2 normalised to itself: the active constraint g̃₂ᵀd̃ = τ‖g̃₂‖² and
    # ‖d‖ = ‖g₁‖, computed by hand: d̃ = g̃₁ + μ g̃₂ with μ = (τ‖g̃₂‖² − g̃₂ᵀg̃₁)/‖g̃₂‖²
    rows = torch.tensor([[1.0, 0.0], [-1.0 / math.sqrt(2), 1.0 / math.sqrt(2)]], dtype=torch.float64)
    tau = 0.25
    s = 1 / math.sqrt(1.0 + EPS)  # both rows have norm 1: v̂ = 1 after the first call
    g1, g2 = rows[0] * s, rows[1] * s
    mu = (tau * g2.dot(g2) - g2.dot(g1)) / g2.dot(g2)
    d = g1 + mu * g2
    expected = d / d.norm()
    got = build("pcd", tau=tau)(rows)
    assert torch.allclose(got, expected, rtol=0, atol=1e-14)
    d_tilde = got / got.norm() * d.norm()  # the QP's solution, from the output
    assert g2.dot(d_tilde).item() == pytest.approx(tau * g2.dot(g2).item(), rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_moving_average_follows_its_formula(dtype):
    # kept in float64 whatever the gradients' dtype, the step count as an int64 tensor
    agg, k = build("pcd", beta=0.9), 3
    g = torch.Generator().manual_seed(3)
    ema = torch.zeros(k, dtype=torch.float64)
    for step in range(1, 5):
        rows = torch.randn(k, 8, generator=g, dtype=torch.float64).to(dtype)
        agg(rows)
        ema = 0.9 * ema + 0.1 * (rows.double() @ rows.double().T).diagonal()
        assert agg.sq_norm_ema.dtype == torch.float64 and agg.steps.dtype == torch.int64
        assert torch.allclose(agg.sq_norm_ema, ema, rtol=1e-6 if dtype == torch.float32 else 1e-14, atol=0)
        assert int(agg.steps) == step


def test_a_secondary_scaled_at_every_call_changes_nothing():
    # the normalisation makes τ a scale-free fraction (up to ε): ×1e3 on row 2 at every call
    g = torch.Generator().manual_seed(5)
    plain, scaled = build("pcd"), build("pcd")
    for _ in range(4):
        rows = _problem(int(torch.randint(0, 10_000, (1,), generator=g)), 4, 4)
        big = rows.clone()
        big[2] *= 1e3
        assert torch.allclose(scaled(big), plain(rows), rtol=0, atol=1e-9 * rows[0].norm().item())


def test_one_tau_per_secondary_objective():
    # a list sets each secondary objective's τ
    rows = _problem(11, 4, 4)
    agg = build("pcd", tau=[0.0, 0.3, 0.1])
    history = []
    for call in range(2):
        rows = _problem(11 + call, 4, 4)
        history.append(rows.square().sum(1))
        expected = reference_direction(rows, history, [0.0, 0.3, 0.1])
        assert torch.allclose(agg(rows), expected, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match=r"tau has 3 values; allowed: one per secondary objective \(4 for K = 5\)"):
        build("pcd", tau=[0.0, 0.3, 0.1])(_problem(11, 5, 5))


@pytest.mark.parametrize("k", [4, 20])
def test_an_unfinished_solve_is_counted_not_hidden(k):
    # one step cannot add the K − 1 violated constraints of a conflicting problem
    rows = _problem(1, k, k, d=64)
    agg = build("pcd", max_iter=1, tau=0.3)
    assert torch.isfinite(agg(rows)).all()
    assert int(agg.stats["not_converged"]) == 1
    full = build("pcd", tau=0.3)
    full(rows)
    assert int(full.stats.get("not_converged", torch.zeros(()))) == 0


@pytest.mark.parametrize("k", [2, 20])
def test_max_iter_steps_are_enough_for_max_iter_constraints(k):
    # a conflicting problem whose K − 1 constraints are all added, one step each, no drop
    rows = torch.eye(k, dtype=torch.float64)
    rows[1:, 0] = -1.0  # every secondary conflicts with g₁ = e₁; their other parts are orthogonal
    exact = build("pcd", max_iter=k - 1)
    exact(rows)
    assert int(exact.stats.get("not_converged", torch.zeros(()))) == 0
    short = build("pcd", max_iter=max(1, k - 2))
    short(rows)
    assert int(short.stats.get("not_converged", torch.zeros(()))) == (k > 2)


def test_a_shape_change_raises_and_reset_starts_over():
    k = 3
    agg = build("pcd")
    agg(_problem(0, k, k))
    with pytest.raises(
        ValueError,
        match=rf"^PCD: state 'sq_norm_ema' has shape \({k},\) but this call needs \({k + 1},\) \(K changed\?\); call reset\(\)",
    ):
        agg(_problem(0, k + 1, k + 1))
    agg.reset()
    assert torch.isfinite(agg(_problem(0, k + 1, k + 1))).all()


def test_a_tau_list_is_copied_to_a_device_once():
    from tests.host_traffic import HostTraffic, forbid_host_traffic

    agg = build("pcd", tau=[0.1, 0.2], check_finite="off")
    rows = torch.empty(3, 5, device="meta")
    agg(rows)  # the first call on the device copies τ there
    with forbid_host_traffic():
        agg(rows)
        agg(rows)
    fresh = build("pcd", tau=[0.1, 0.2], check_finite="off")
    with forbid_host_traffic(), pytest.raises(HostTraffic):  # the guard sees the first copy
        fresh(rows)


def test_the_ends_of_the_option_ranges_are_allowed():
    # τ = 1 (a secondary keeps all of its normalised progress) and β = 0 (no averaging)
    rows = _problem(3, 3, 3)
    assert torch.isfinite(build("pcd", tau=1.0, beta=0.0, eps=0.0)(rows)).all()
    assert torch.isfinite(build("pcd", tau=[0.0, 1.0])(rows)).all()


def test_many_objectives_warn_once_of_the_solves_cost(monkeypatch):
    # from SLOW_K objectives on a conflicting call costs O(K⁴): one warning per aggregator
    monkeypatch.setattr(pcd, "SLOW_K", 4)
    agg = build("pcd")
    with pytest.warns(
        UserWarning, match=r"PCD with K=4 objectives: .* up to 22 active-set steps, each solving a 3x3 system"
    ):
        agg(_problem(1, 4, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agg(_problem(2, 4, 4))
        build("pcd")(_problem(3, 3, 3))  # below SLOW_K: no warning
