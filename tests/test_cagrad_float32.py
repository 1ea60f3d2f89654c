"""CAGrad on float32 (and float64) Jacobians against cvxpy's primal optimum (arXiv 2110.14048, eq. 2).

The primal, solved by cvxpy on the very rows the aggregator sees (float32 values in float64):
maximise t subject to g_i·d ≥ t for every task and ‖d − g0‖ ≤ c‖g0‖. The aggregator's direction
(``rescale=0``, so d itself) must lie in that ball and reach t* up to a stated margin, or say
that it did not (its ``not_converged`` counter). The float32 Gramian of a rank-deficient or
Pareto-stationary matrix is indefinite at rounding level; before the dual's quadratic form got
its ridge (``morl.solvers.gramian.definite_ridge``) such solves ended on spurious stationary
points, reported converged, with worst-task gains up to 5× below t* (the regression below).
"""

from __future__ import annotations

import importlib

import cvxpy as cp
import numpy as np
import pytest
import torch

import morl
import morl.aggregators.cagrad as cagrad_module
from jacobians import cases, randomly_spread
from morl.solvers.gramian import definite_ridge, gramian

gramian_module = importlib.import_module("morl.solvers.gramian")  # the package re-exports a function of that name

KS = (3, 5, 8, 10, 12, 16, 24)
CS = (0.2, 0.5, 0.9, 2.0)
#: Deficit t* − min_i g_i·d allowed for a solve reported converged, rows scaled to a largest
#: norm of 1. Measured over seeds 0-9 (3400 directions per dtype): float32 ≤ 7.0e-4 (the property
#: suite's rank-deficient rows, whose optimum needs directions near G's rounding), float64
#: ≤ 5.0e-9 (cvxpy's own accuracy).
DEFICIT = {torch.float32: 3e-3, torch.float64: 5e-8}
#: ‖d − g0‖ / (c‖g0‖) − 1, measured ≤ 1.1e-7 (float32: the direction's own rounding), < 0
#: (float64). Without the rounding interval of ‖g_w‖ in the step (``primal_weights``): 3.7e-6.
BALL = {torch.float32: 1e-6, torch.float64: 1e-12}


def _problems(seed: int, ks=KS, d: int = 64):
    """(label, J [K, D] float64 with largest row norm 1) over K, rank, spread, stationarity; then
    the property suite's full, rank-deficient (rank K/3) and stationary matrices at scale 1."""
    gen = torch.Generator().manual_seed(seed)
    for k in ks:
        for rank in sorted({2, max(2, k // 2), k}):
            for spread in (0.0, 3.0):
                for stationary in (False, True):
                    j = randomly_spread(gen, k, d, rank, spread, stationary)
                    yield f"seed={seed} K={k} rank={rank} spread={spread:g} st={stationary}", j / j.norm(dim=1).max()
    for label, j in cases(gen, torch.float64, ks=tuple(k for k in (3, 6, 15) if k <= max(ks))):
        if "s=1 " in label + " ":
            yield f"seed={seed} {label}", j / j.norm(dim=1).max()


def _primal_optimum(j: np.ndarray, c: float) -> float:
    g0 = j.mean(0)
    d, t = cp.Variable(j.shape[1]), cp.Variable()
    cp.Problem(cp.Maximize(t), [j @ d >= t, cp.norm(d - g0) <= c * np.linalg.norm(g0)]).solve(solver=cp.CLARABEL)
    return float(t.value)


def _check_against_cvxpy(seeds, ks=KS) -> dict:
    """Every problem × c × dtype through the aggregator; returns the counts and worst values."""
    worst = {dt: 0.0 for dt in DEFICIT}
    outside = {dt: -1.0 for dt in DEFICIT}
    not_converged = {dt: 0 for dt in DEFICIT}
    total = 0
    for seed in seeds:
        for label, j in _problems(seed, ks):
            j32 = j.float()
            rows = j32.double().numpy()  # what both dtypes see: the float32 values
            g0 = rows.mean(0)
            for c in CS:
                best = _primal_optimum(rows, c)
                for dtype in (torch.float32, torch.float64):
                    agg = morl.build("cagrad", c=c, rescale=0)
                    d = agg(j32.to(dtype)).double().numpy()
                    ball = np.linalg.norm(d - g0) / (c * np.linalg.norm(g0)) - 1
                    assert ball <= BALL[dtype], (label, c, dtype, ball)
                    outside[dtype] = max(outside[dtype], ball)
                    total += 1
                    if agg.not_converged is not None and int(agg.not_converged):
                        not_converged[dtype] += 1
                        continue
                    deficit = best - float((rows @ d).min())
                    assert deficit <= DEFICIT[dtype], (label, c, dtype, deficit, best)
                    worst[dtype] = max(worst[dtype], deficit)
    return {"worst": worst, "outside": outside, "not_converged": not_converged, "total": total}


def test_directions_reach_the_primal_optimum_or_say_they_did_not():
    """Seed 0, K ≤ 12 (the exact paths and the first iterative K): 232 directions per dtype.
    Measured over seeds 0-9: at most 3 float32 solves per seed say they stopped at max_iter
    (5 in all), no float64 one; bound 8 of 232."""
    out = _check_against_cvxpy([0], ks=(3, 5, 8, 10, 12))
    assert out["total"] == 2 * 232
    assert all(n <= 8 for n in out["not_converged"].values()), out


@pytest.mark.slow
def test_directions_reach_the_primal_optimum_over_ten_seeds():
    """Seeds 0-9, K up to 24: 3400 directions per dtype. Measured: 5 float32 solves (K ≥ 12)
    say they stopped at max_iter, no float64 one; bound 30 each."""
    out = _check_against_cvxpy(range(10))
    assert out["total"] == 2 * 3400
    assert all(n <= 30 for n in out["not_converged"].values()), out


#: The K = 3 Pareto-stationary Gramian (rank 3 rows, no spread, D = 48) that exposed the bug:
#: the 8th draw of generator 20261125 in tools/mutant_probe.py's problem set, normalised to a
#: largest diagonal of 1. Kept as exact float64 literals, so the instance is the same under any
#: seeding (MORL_TEST_SEED_OFFSET shifts the generator it came from).
_PROBE_GRAMIAN = (
    ("0x1.fc01aa0a1b946p-1", "0x1.22beb9db8df59p-1", "-0x1.437ccb4ee72dap-1"),
    ("0x1.22beb9db8df59p-1", "0x1.0000000000000p+0", "-0x1.38fae9e082875p-1"),
    ("-0x1.437ccb4ee72dap-1", "-0x1.38fae9e082875p-1", "0x1.fa8ec845636edp-2"),
)


def _rounded_probe_gramian() -> torch.Tensor:
    return torch.tensor([[float.fromhex(x) for x in row] for row in _PROBE_GRAMIAN], dtype=torch.float64)


@pytest.mark.parametrize("path", ["exact", "active_set"])
def test_the_rounded_stationary_gramian_that_returned_a_worst_task_gain_5x_below_optimal(path):
    """G rounded to float32 is indefinite (λ_min = −1.8e-8). Its dual's spurious stationary point
    (g_w ≈ 0) passed the gap check: weights ~200-500, worst gain −0.123 against cvxpy's
    −0.0245. Now both K = 3 routes (enumeration; the active-set steps a warm start or K > 6
    takes) give the optimum's weights, 1/3 + 0.455·e_3, measured to 1e-7."""
    gram = _rounded_probe_gramian()
    lam, vec = torch.linalg.eigh(gram)
    j = (vec * lam.clamp_min(0).sqrt()).numpy()  # rows with this Gramian (float64)
    assert float(torch.linalg.eigvalsh(gram.float().double())[0]) < -1e-8  # indefinite once rounded
    if path == "exact":
        weights, _ = cagrad_module.cagrad_dual_exact(gram.float(), 0.9)
    else:
        weights, _, converged = cagrad_module.cagrad_dual_solve(gram.float(), 0.9)
        assert bool(converged)
    gain = float((j @ (weights.double().numpy() @ j)).min())
    assert abs(gain - _primal_optimum(j, 0.9)) <= 1e-5, gain
    assert float(weights.double().abs().sum()) < 2.0  # not the 900-long combination


def _unit_min_eig(gram: torch.Tensor) -> float:
    d = gram.diagonal().clamp_min(1e-300).sqrt()
    return float(torch.linalg.eigvalsh(gram / (d[:, None] * d[None, :]))[0])


def _float32_gramians(k: int) -> list[torch.Tensor]:
    """Gramians formed by ``gramian`` from float32 rank-deficient and stationary rows (D = 64 and
    20000, row norms spread over 1 or 1e3), divided by their largest diagonal entry; and one
    constructed with λ_min = −5Kε (unit diagonal), far from any rung's boundary."""
    grams = []
    for seed in range(4):
        gen = torch.Generator().manual_seed(seed)
        for d in (64, 20000):
            for rank, stationary in ((2, False), (max(2, k // 2), True), (k, True)):
                j = randomly_spread(gen, k, d, rank, 3.0 * (seed % 2), stationary).float()
                g32 = gramian(j).double()
                grams.append(g32 / g32.diagonal().max())
    q = torch.linalg.qr(torch.randn(k, k, generator=torch.Generator().manual_seed(k), dtype=torch.float64))[0]
    made = q @ torch.diag(torch.linspace(-5 * k * EPS32, 2.0, k, dtype=torch.float64)) @ q.T
    d = made.diagonal().sqrt()
    return grams + [made / (d[:, None] * d[None, :])]


EPS32 = torch.finfo(torch.float32).eps


@pytest.mark.parametrize("k", [3, 8, 16])
def test_definite_ridge_makes_the_row_scaled_gramian_semidefinite_and_no_more(k, monkeypatch):
    """Against eigvalsh of D⁻¹GD⁻¹ (D² = diag G): on CPU δ = ridge/2 is max(−λ_min, ε/16), so
    D⁻¹GD⁻¹ + δI is semi-definite and 0.99δ would not do (unless δ is the floor); the branch-free
    route (no flag read, a GPU's) returns the least rung (ε/16)·4^j whose Cholesky passes: at least
    the CPU δ, less than 4× it (up to Cholesky's rounding, 1e-13 here). A batch gives each
    member's value on both routes."""
    grams = _float32_gramians(k)
    batch = torch.stack(grams)
    cpu = definite_ridge(batch, torch.float32).flatten() / 2
    for gram, delta in zip(grams, cpu):
        low = _unit_min_eig(gram)
        assert low + float(delta) >= -1e-15
        assert float(delta) == EPS32 / 16 or low + 0.99 * float(delta) < 0
        assert float(definite_ridge(gram, torch.float32)) / 2 == float(delta)
    assert float(cpu[-1]) > 4 * k * EPS32  # the constructed case: its λ_min is −5Kε, rescaled
    monkeypatch.setattr(gramian_module, "reads_are_free", lambda t: False)
    ladder = definite_ridge(batch, torch.float32).flatten() / 2
    for gram, delta, exact in zip(grams, ladder, cpu):
        rung = round(np.log(float(delta) / (EPS32 / 16)) / np.log(4.0))
        assert float(delta) == pytest.approx(EPS32 / 16 * 4.0**rung, rel=1e-12)
        low = _unit_min_eig(gram)
        assert low + float(delta) > -1e-13
        assert rung == 0 or low + float(delta) / 4 < 1e-13, (low, float(delta))
        assert float(exact) * (1 - 1e-9) <= float(delta) < 4 * float(exact) + 1e-13
        assert float(definite_ridge(gram, torch.float32)) / 2 == float(delta)


def test_stationary_points_with_c_of_at_least_one_give_zero_and_say_converged():
    """c ≥ 1 at a Pareto-stationary point: 0 is in the ball and optimal. K = 12-24 goes through
    FISTA, which cannot certify it (‖g_w‖ → 0); the min-norm candidate and the duality-gap
    certificate do. Measured on seeds 0-2: every direction ‖d‖ ≤ 1e-7·max‖g_i‖, all converged."""
    for seed in range(3):
        gen = torch.Generator().manual_seed(100 + seed)
        for k in (12, 16, 24):
            for rank in (2, k // 2, k):
                j = randomly_spread(gen, k, 64, rank, 0.0, stationary=True)
                for dtype in (torch.float32, torch.float64):
                    for c in (1.0, 2.0):
                        agg = morl.build("cagrad", c=c, rescale=0)
                        d = agg(j.to(dtype))
                        assert float(d.double().norm()) <= 1e-7 * float(j.norm(dim=1).max()), (seed, k, rank, dtype, c)
                        assert agg.not_converged is None or int(agg.not_converged) == 0, (seed, k, rank, dtype, c)


@pytest.mark.parametrize("c", [0.2, 0.5, 0.9])
def test_a_mean_gradient_small_against_its_rows_keeps_the_direction_in_the_ball(c):
    """The sweep's seed-5 rank-1 rows (norms 0.78, 0.23, 1, the last opposed): g0 = 0.0041·u,
    and ‖g0‖² = 1ᵀG1/K² loses 3 of float32's 7 digits to cancellation. Stepping r = c‖g0‖ as
    read from G left the ball by 5.3e-4 of r at c = 0.2; the step now takes the lower end of
    r's rounding interval: measured 1.1e-3 inside, bound: not outside by more than 1e-5."""
    j = dict(_problems(5))["seed=5 K=3 rank-deficient s=1"]
    j32 = j.float()
    rows = j32.double()
    g0 = rows.mean(0)
    for path in ("exact", "solve"):
        agg = morl.build("cagrad", c=c, rescale=0, warm_start=path == "solve")
        d = agg(j32).double()
        assert float((d - g0).norm()) <= c * float(g0.norm()) * (1 + 1e-5), path
        assert float((rows @ d).min()) >= float((rows @ g0).min()) - 1e-6  # no worse than the mean


@pytest.mark.parametrize("c", [1.0, 1.5, 2.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("route", ["cpu", "branch_free"])
def test_a_batch_of_stationary_problems_is_certified_member_by_member(route, dtype, c, monkeypatch):
    """A [B, K, K] batch mixing Pareto-stationary Gramians (optimum 0 for c ≥ 1, found by the
    min-norm candidate and certified only by the duality gap; c = 1 is the edge) with ordinary
    ones, on the CPU and on the branch-free route a GPU takes: every member's weights are those
    of its solve alone, and every stationary member's direction is exactly 0. In float64 each
    member's ``converged`` flag is its own and every stationary member is certified. In float32
    the certificate of an optimum of 0 sits on the Gramian's rounding (bmm against mm): over
    seeds 0-59, 21 of 1080 stationary solves were not certified on either route and the batch
    and the single solve disagreed on 11 flags, with directions exactly 0 all the same; so
    float32 flags are not compared. The certificate's reductions run over each member's own K
    rows."""
    from morl.aggregators.cagrad import cagrad_dual_solve

    if route == "branch_free":
        monkeypatch.setattr(cagrad_module, "reads_are_free", lambda t: False)
    gen = torch.Generator().manual_seed(7)
    k = 12
    jacobians = [randomly_spread(gen, k, 64, rank, 0.0, stationary=stationary)
                 for rank in (2, 6, 12) for stationary in (True, False)]
    grams = torch.stack([gramian(j.to(dtype)) for j in jacobians])
    grams = grams / torch.diagonal(grams, dim1=-2, dim2=-1).amax(-1)[:, None, None]
    weights, _, converged = cagrad_dual_solve(grams, c)
    for i, gram in enumerate(grams):
        weights_i, _, converged_i = cagrad_dual_solve(gram, c)
        if dtype == torch.float64:
            assert bool(converged[i]) == bool(converged_i), i
        d_i = weights[i] @ jacobians[i].to(weights)
        scale = float(jacobians[i].norm(dim=1).max())
        assert float((d_i - weights_i @ jacobians[i].to(weights)).norm()) <= (1e-3 if dtype == torch.float32 else 1e-6) * scale
        if i % 2 == 0:  # stationary: 0 is the optimum and is returned as such
            assert not bool(weights[i].any()) and not bool(weights_i.any()), i
    if dtype == torch.float64:
        assert bool(converged[0::2].all())  # the stationary members: certified


def test_the_branch_free_route_reaches_the_primal_optimum_and_says_so(monkeypatch):
    """The route a GPU takes (no host reads: every round of the start and of the active-set
    steps runs, with no early exit). Seed 0, K = 12 and 16: every direction reported converged
    is within DEFICIT of cvxpy's t*, and in the ball, and almost all are. Measured over seeds
    0-9 (1320 solves per dtype): 3 float32 solves say they did not converge, at most 1 per
    seed, no float64 one; bound 3 per seed and dtype. Before the rounds ran off the CPU
    (FISTA's answer alone), 13-20 of 132 per seed did."""
    monkeypatch.setattr(cagrad_module, "reads_are_free", lambda t: False)
    out = _check_against_cvxpy([0], ks=(12, 16))
    assert out["total"] == 2 * 132
    assert all(n <= 3 for n in out["not_converged"].values()), out


def test_small_problems_on_the_branch_free_route_are_exact_and_say_so(monkeypatch):
    """K ≤ EXACT_MAX_K without a warm start on the route a GPU takes: what the active-set start
    leaves is enumerated, so every solve is exact and converged (FISTA is not run) and gives
    the CPU route's worst-task gain; the documented defaults of the solver (max_iter 100, tol 1e-10)
    and cagrad_dual_weights as its first two outputs."""
    import inspect

    from morl.aggregators.cagrad import EXACT_MAX_K, cagrad_dual_solve

    params = inspect.signature(cagrad_dual_solve).parameters
    assert (params["max_iter"].default, params["tol"].default) == (100, 1e-10)
    gen = torch.Generator().manual_seed(4)
    # cagrad_dual_weights is the solver's first two outputs, on the branch-free K > 10 route too
    # (K = 16, row norms over 1e6). Since session 13 the active-set steps end these solves exact
    # whatever FISTA's budget, so the budget's value is checked by the signature above only.
    with monkeypatch.context() as m:
        m.setattr(cagrad_module, "reads_are_free", lambda t: False)
        for _ in range(3):
            j = randomly_spread(gen, 16, 48, 16, 6.0, False)
            g = j @ j.T
            g = g / g.diagonal().max()
            solved = cagrad_dual_solve(g, 0.5)
            assert all(torch.equal(a, b) for a, b in zip(cagrad_module.cagrad_dual_weights(g, 0.5), solved[:2]))
    gen = torch.Generator().manual_seed(3)
    grams = []
    for k in (3, 6, EXACT_MAX_K):
        for rank in (2, k):
            for spread, stationary in ((0.0, False), (3.0, False), (0.0, True), (6.0, True)):
                j = randomly_spread(gen, k, 48, rank, spread, stationary)
                g = j @ j.T
                grams.append(g / g.diagonal().max())
    cpu = [cagrad_dual_solve(g, c) for g in grams for c in (0.5, 0.9)]
    monkeypatch.setattr(cagrad_module, "reads_are_free", lambda t: False)
    for (weights, _, converged), (g, c) in zip(cpu, [(g, c) for g in grams for c in (0.5, 0.9)]):
        weights_bf, _, converged_bf = cagrad_dual_solve(g, c)
        assert bool(converged) and bool(converged_bf), (g.shape[-1], c)
        # the same worst-task gain min_i g_i·d = min_i (G weights)_i (weights are not unique
        # where G is singular)
        assert abs(float((g @ weights_bf).min() - (g @ weights).min())) <= 1e-9, (g.shape[-1], c)


def test_warm_started_small_solves_end_exact_on_the_cpu():
    """A warm start (``init``) skips the active-set start and runs FISTA (here 40 steps, as a
    second call of a warm-started CAGrad might); on the CPU the active-set steps after it
    (K + 10 rounds) then end on the exact optimum: converged, with the cold solve's worst-task
    gain min_i (G weights)_i to 1e-9, for K = 3, 5, 8 problems of every rank and spread."""
    from morl.aggregators.cagrad import cagrad_dual_solve

    gen = torch.Generator().manual_seed(11)
    for k in (3, 5, 8):
        for rank in sorted({2, k}):
            for spread, stationary in ((0.0, False), (3.0, False), (3.0, True)):
                j = randomly_spread(gen, k, 48, rank, spread, stationary)
                g = j @ j.T
                g = g / g.diagonal().max()
                for c in (0.2, 0.9):
                    cold, _, _ = cagrad_dual_solve(g, c)
                    init = torch.rand(k, generator=gen, dtype=torch.float64)
                    warm, _, converged = cagrad_dual_solve(g, c, max_iter=40, init=init / init.sum())
                    assert bool(converged), (k, rank, spread, stationary, c)
                    assert abs(float((g @ warm).min() - (g @ cold).min())) <= 1e-9, (k, rank, spread, stationary, c)
