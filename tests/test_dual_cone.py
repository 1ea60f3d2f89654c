"""morl.solvers.dual_cone against independent QP solvers (quadprog, and cvxpy for rank-deficient
Gramians), on seeded random problems.

The problem: v = argmin_{v ≥ u} vᵀGv. quadprog (Goldfarb-Idnani dual active set) needs G
positive definite, so it gets full-rank Gramians; cvxpy (Clarabel, interior point) solves the
rank-deficient ones in the form min ‖Jᵀv‖² s.t. v ≥ u, and since v is not unique there, the
projections Jᵀv are compared. Both the exact enumeration (K ≤ 10) and the iterative solver
(forced with ``exact_max_k=0``, and by K > 10) are checked, with u of any sign (the solver is
general, not only UPGrad's p_i e_i).
"""

import cvxpy as cp
import numpy as np
import pytest
import quadprog
import torch

import morl.solvers.dual_cone as dc
import morl.solvers.dual_cone_host as dc_host
from morl.aggregators import build
from morl.solvers.dual_cone import active_set_steps, project_to_dual_cone, project_with_free_set
from morl.solvers.min_norm import equilibrate


@pytest.fixture(params=["host", "pdas", "legacy"])
def path(request, monkeypatch):
    """Which CPU solver takes one Gramian: the Python-float active-set rounds (small problems),
    the batched torch rounds (HOST_MAX_WORK = 0), or neither (PDAS_ROUNDS = 0: the enumeration
    and iterative solvers that batched Gramians and other devices use)."""
    if request.param == "pdas":
        monkeypatch.setattr(dc, "HOST_MAX_WORK", 0)
    if request.param == "legacy":
        monkeypatch.setattr(dc, "PDAS_ROUNDS", 0)
    return request.param


def _problem(seed, k, d, rank, shift=0.5):
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, rank, generator=gen, dtype=torch.float64) @ torch.randn(rank, d, generator=gen, dtype=torch.float64)
    j = j + shift * torch.randn(k, 1, generator=gen, dtype=torch.float64) * j[:1]  # shared direction: conflicts and agreements
    u = torch.randn(3, k, generator=gen, dtype=torch.float64)
    u = torch.cat([torch.eye(k, dtype=torch.float64)[: min(k, 3)], u.abs(), u])  # UPGrad's, positive, any sign
    return j, u


def _quadprog(gram: np.ndarray, u: np.ndarray) -> np.ndarray:
    # quadprog: min ½xᵀGx − aᵀx s.t. Cᵀx ≥ b
    return quadprog.solve_qp(gram, np.zeros(len(u)), np.eye(len(u)), u)[0]


def _cvxpy_projection(j: np.ndarray, u: np.ndarray) -> np.ndarray:
    v = cp.Variable(len(u))
    cp.Problem(cp.Minimize(cp.sum_squares(j.T @ v)), [v >= u]).solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return j.T @ v.value


@pytest.mark.parametrize("k", [1, 2, 3, 6, 10, 11, 25, 50])
@pytest.mark.parametrize("exact_max_k", [10, 0])
def test_full_rank_matches_quadprog(k, exact_max_k, path):
    """Measured over seeds 0..4 (K up to 50, both paths agree to the digit): max |v − v_qp| /
    max(1, |v_qp|) = 7.3e-10, at K = 11 where cond(G) = 1.8e6 (ε·cond: either solver's
    rounding; 3e-11 at K = 10, cond 1e5); bound 5e-9. The projections conflict by at most
    6.9e-12 relative (the ridge ρ = 1e-12 times v); bound 1e-10. The same worst case on the
    host, torch-rounds and legacy paths (the `path` fixture)."""
    worst = 0.0
    for seed in range(5):
        j, u = _problem(seed, k, k + 5, k)
        gram = j @ j.T
        v, converged = project_to_dual_cone(gram, u, exact_max_k=exact_max_k)
        assert bool(converged.all())
        g_n = (gram / gram.diagonal().max()).numpy()  # quadprog on a well-scaled G, same minimiser
        ref = np.stack([_quadprog(g_n, row.numpy()) for row in u])
        worst = max(worst, float((np.abs(v.numpy() - ref) / np.maximum(1.0, np.abs(ref))).max()))
        x = v @ j  # projections Jᵀv, each in the dual cone: J x ≥ 0
        norms = j.norm(dim=1)
        assert float(((j @ x.T) / (norms[:, None] * norms.max())).min()) >= -1e-10  # the 1e-12 ridge
        assert bool((v >= u - 1e-12).all())
    assert worst <= 5e-9, worst


@pytest.mark.parametrize("k, rank", [(4, 2), (8, 3), (12, 5), (30, 10)])
@pytest.mark.parametrize("exact_max_k", [10, 0])
def test_rank_deficient_matches_cvxpy(k, rank, exact_max_k, path):
    """v is not unique when G is singular; the projection Jᵀv is. Measured over seeds 0..4:
    ‖Jᵀv − Jᵀv_cvx‖ / max‖g‖ ≤ 2.3e-9 on each of the three paths; bound 2e-8."""
    worst = 0.0
    for seed in range(5):
        j, u = _problem(seed, k, 20, rank)
        v, converged = project_to_dual_cone(j @ j.T, u, exact_max_k=exact_max_k)
        assert bool(converged.all())
        jn = j.numpy()
        for row, v_row in zip(u.numpy(), v.numpy()):
            ref = _cvxpy_projection(jn, row)
            worst = max(worst, float(np.linalg.norm(jn.T @ v_row - ref) / np.linalg.norm(jn, axis=1).max()))
    assert worst <= 2e-8, worst


def test_exact_and_iterative_agree_and_scale_does_not_matter():
    """The two paths on the same problems (K = 8), and the weights at G·1e-20 and G·1e20."""
    for seed in range(5):
        j, u = _problem(seed, 8, 9, 8)
        gram = j @ j.T
        v_exact, _ = project_to_dual_cone(gram, u)
        v_iter, _ = project_to_dual_cone(gram, u, exact_max_k=0)
        torch.testing.assert_close(v_iter, v_exact, rtol=1e-9, atol=1e-9)
        for s in (1e-20, 1e20):
            torch.testing.assert_close(project_to_dual_cone(gram * s, u)[0], v_exact, rtol=1e-9, atol=1e-9)


def test_hand_computed_projection(path):
    """g1 = (1, 0), g2 = (−1, 1): the dual cone is {x1 ≥ 0, x2 ≥ x1}, spanned by the rays (0, 1)
    and (1, 1). π(g1) = (½, ½) = g1 + ½g2: v = (1, ½). π(g2) = (0, 1) = g1 + g2: v = (1, 1).
    u = (1, 1): g1 + g2 = (0, 1) is in the cone, v = u. u = (−1, 0): −g1 projects to 0, and
    Jᵀv = (v1 − v2, v2) = 0 with v ≥ u gives v = 0."""
    j = torch.tensor([[1.0, 0.0], [-1.0, 1.0]], dtype=torch.float64)
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
    expected = torch.tensor([[1.0, 0.5], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    for exact_max_k in (10, 0):
        v, _ = project_to_dual_cone(j @ j.T, u, exact_max_k=exact_max_k)
        torch.testing.assert_close(v, expected, rtol=0, atol=1e-10)


def test_zero_rows_and_batches():
    """A zero row changes nothing else (same projections as without it) and keeps v_k = u_k
    where u_k ≥ 0; leading dims batch (and the scale of each Gramian does not matter)."""
    j, u = _problem(0, 5, 8, 5)
    j[2] = 0
    gram = j @ j.T
    v, _ = project_to_dual_cone(gram, u)
    rest = [0, 1, 3, 4]
    v_rest, _ = project_to_dual_cone(gram[rest][:, rest], u[:, rest])
    torch.testing.assert_close(v[:, rest] @ j[rest], v_rest @ j[rest], rtol=0, atol=1e-10)
    keep = u[:, 2] >= 0
    torch.testing.assert_close(v[keep, 2], u[keep, 2], rtol=0, atol=1e-12)
    # Batched Gramians take the enumeration, one CPU Gramian the active-set rounds: where u_2 < 0
    # the zero row's v_2 is any value in [u_2, 0] up to the ridge's 1e-12·v_2² (the enumeration's
    # tie rule keeps u_2, the rounds the ridged optimum 0), so the rest of v is compared
    batched, _ = project_to_dual_cone(torch.stack([gram, 2 * gram]), torch.stack([u, u]))
    torch.testing.assert_close(batched[0][:, rest], v[:, rest], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(batched[1][:, rest], v[:, rest], rtol=1e-9, atol=1e-9)
    assert bool((batched[:, :, 2] >= u[:, 2] - 1e-12).all() and (batched[:, :, 2] <= u[:, 2].clamp_min(0) + 1e-12).all())


def test_too_few_active_set_steps_are_reported():
    """One active-set step from the all-active start cannot reach the optimum of a problem
    whose optimum frees several rows: ``converged`` says so (the aggregators count it)."""
    j, _ = _problem(1, 12, 15, 12)
    gram = j @ j.T
    g_hat, d = equilibrate(gram / gram.diagonal().max(), 1e-12)
    c = torch.eye(12, dtype=torch.float64) * d
    _, converged = active_set_steps(g_hat, c, c, torch.zeros_like(c, dtype=torch.bool), tol=1e-8, rounds=1)
    z, converged_long = active_set_steps(g_hat, c, c, torch.zeros_like(c, dtype=torch.bool), tol=1e-8, rounds=40)
    assert not bool(converged.all()) and bool(converged_long.all())


@pytest.mark.parametrize("k, rank", [(7, 7), (9, 4), (10, 10), (10, 3)])
def test_active_set_first_matches_the_enumeration(monkeypatch, k, rank):
    """On CPU, K ≤ 10 problems with many free sets (B·2^K > ENUMERATE_MAX_SETS) start with the
    active-set steps, and those they leave unfinished are enumerated. Forced both ways on the
    same problems: the projections Jᵀv agree (v is not unique when G is singular) to 2e-8 of
    max‖g‖ (the rank-deficient bound above; measured 7.9e-9 at K = 9, rank 4, seeds 0..2, where
    the active-set rule stops at multipliers ≥ −1e-10), and every problem counts as converged; a run in which the active-set steps finish
    nothing gives the enumeration's answer exactly."""
    monkeypatch.setattr(dc, "PDAS_ROUNDS", 0)  # the routing of the solvers the rounds fall back on
    for seed in range(3):
        j, u = _problem(seed, k, 12, rank)
        gram = j @ j.T
        monkeypatch.setattr(dc, "ENUMERATE_MAX_SETS", 10**9)
        v_enum, _ = project_to_dual_cone(gram, u)
        monkeypatch.setattr(dc, "ENUMERATE_MAX_SETS", 0)
        v_act, converged = project_to_dual_cone(gram, u)
        assert bool(converged.all())
        scale = j.norm(dim=1).max()
        assert float((v_act @ j - v_enum @ j).norm(dim=1).max() / scale) <= 2e-8
        real = dc.dual_cone_iterative
        monkeypatch.setattr(dc, "dual_cone_iterative", lambda g, c, m, t: (real(g, c, m, t)[0], torch.zeros(c.shape[:-1], dtype=torch.bool)))
        v_fallback, converged = project_to_dual_cone(gram, u)
        monkeypatch.setattr(dc, "dual_cone_iterative", real)
        assert bool(converged.all()) and torch.equal(v_fallback, v_enum)


@pytest.mark.parametrize("k, rank", [(2, 2), (5, 5), (10, 4), (25, 25)])
def test_any_warm_start_gives_the_cold_optimum(k, rank, path):
    """The free set a solve starts from (the previous call's, for UPGrad/DualProj) changes how
    many rounds it takes, not the answer: all-free, all-active, random and the optimal starts
    against the cold solve: projections Jᵀv to 2e-9 of max‖g‖ (measured over problem seeds
    0..39 on both paths: 0 where the same free set is reached, up to 5.2e-10 at K = 10, rank 4
    and K = 25, where the stopping rule's multiplier tolerance, 1e-10, admits a neighbouring
    free set; seeds 0..2 alone reached 6.5e-12, and the bound was 5e-11)."""
    gen = torch.Generator().manual_seed(7)
    for seed in range(3):
        j, u = _problem(seed, k, 12, rank)
        gram = j @ j.T
        v_cold, converged, free = project_with_free_set(gram, u)
        assert bool(converged.all())
        starts = [torch.ones_like(free), torch.zeros_like(free), torch.rand(free.shape, generator=gen) < 0.5, free]
        for start in starts:
            v, converged, _ = project_with_free_set(gram, u, free_start=start)
            assert bool(converged.all())
            assert float((v @ j - v_cold @ j).norm(dim=1).max() / j.norm(dim=1).max()) <= 2e-9


@pytest.mark.parametrize("k", [3, 5])
def test_an_optimal_start_costs_one_solve(monkeypatch, k):
    """From the optimal free sets the rounds stop after the first solve: one K×K solve per
    problem on the host path, one batched solve on the torch path (counted by spies)."""
    j, u = _problem(0, k, k + 5, k)
    gram = j @ j.T
    _, _, free = project_with_free_set(gram, u)
    for name, module, attr in (("host", dc_host, "free_set_solution"), ("pdas", dc, "_free_set_solution")):
        if name == "pdas":
            monkeypatch.setattr(dc, "HOST_MAX_WORK", 0)
        calls = []
        real = getattr(module, attr)
        monkeypatch.setattr(module, attr, lambda *a, real=real, **kw: calls.append(1) or real(*a, **kw))
        project_with_free_set(gram, u, free_start=free)
        monkeypatch.setattr(module, attr, real)
        assert len(calls) == (u.shape[0] if name == "host" else 1)


def test_host_path_declines_what_it_cannot_settle():
    """Non-finite Gramians and zero pivots go back to the torch solvers (None), and a
    problem the rounds leave unsettled is finished there: the result is still the optimum."""
    nan = [[1.0, float("nan")], [float("nan"), 1.0]]
    assert dc_host.project_host(nan, [[1.0, 0.0]], 1e-12, 1e-10, 6) is None
    assert dc_host.solve_dense([[0.0, 0.0], [0.0, 0.0]], [1.0, 1.0]) is None
    j, u = _problem(3, 6, 9, 6)
    gram = j @ j.T
    assert dc_host.project_host(gram.tolist(), u.tolist(), 1e-12, 1e-10, 0) is None  # no rounds: unsettled
    v_ref, _ = project_to_dual_cone(gram, u)
    g_n = (gram / gram.diagonal().max()).numpy()
    ref = np.stack([_quadprog(g_n, row.numpy()) for row in u])
    assert float((np.abs(v_ref.numpy() - ref) / np.maximum(1.0, np.abs(ref))).max()) <= 5e-9


@pytest.mark.parametrize("k, rank", [(6, 6), (8, 3), (10, 10), (10, 4)])
def test_batched_rounds_settle_as_the_per_problem_rounds(monkeypatch, k, rank):
    """From K = BATCH_MIN_K on, B > 1 problems run each round as one batched Cholesky solve
    (pdas_batched). On the same problems, cold, from all-free and from the optimal free sets,
    they settle exactly when the per-problem eliminations do (else both hand the problem to the
    torch solvers), on the same free sets, with the same projection Jᵀv, and v ≥ u to the
    rounding of v = z / d. Measured over seeds 0..39 (480 runs, 334 settled): free sets equal,
    max |ΔJᵀv| / max‖g‖ = 4.5e-13 (v itself differs up to 7e-4 where G is singular: the optimal
    v is not unique there), v ≥ u to 2.0e-16 relative. Bounds: 1e-11 and 4e-16."""
    settled = 0
    for seed in range(4):
        j, u = _problem(seed, k, 12, rank)
        gram, rows = (j @ j.T).tolist(), u.tolist()
        optimal = project_with_free_set(j @ j.T, u)[2].tolist()
        for start in (None, [[True] * k for _ in rows], optimal):
            batched = dc_host.project_host(gram, rows, 1e-12, 1e-10, 6, start)
            with monkeypatch.context() as m:
                m.setattr(dc_host, "BATCH_MIN_K", 10**9)
                single = dc_host.project_host(gram, rows, 1e-12, 1e-10, 6, start)
            assert (batched is None) == (single is None)
            if batched is None:
                continue
            settled += 1
            assert batched[1] == single[1]
            jn, un = j.numpy(), u.numpy()
            v, v_ref = np.array(batched[0]), np.array(single[0])
            assert float(np.abs(v @ jn - v_ref @ jn).max() / np.linalg.norm(jn, axis=1).max()) <= 1e-11
            assert bool((v >= un - 4e-16 * np.abs(un)).all())
    assert settled >= 4  # the optimal starts settle (over seeds 0..199, every one did)


def test_batched_rounds_take_one_round_from_the_optimum_and_decline_an_indefinite_gramian(monkeypatch):
    """From the optimal free sets the batched rounds stop after one (one KKT test per problem);
    a Gramian whose free block is not positive definite (an eigenvalue −1 here) is declined."""
    j, u = _problem(0, 8, 13, 8)
    gram, rows = (j @ j.T).tolist(), u.tolist()
    _, free = dc_host.project_host(gram, rows, 1e-12, 1e-10, 6)
    calls = []
    real = dc_host._next_free
    monkeypatch.setattr(dc_host, "_next_free", lambda *a: calls.append(1) or real(*a))
    assert dc_host.project_host(gram, rows, 1e-12, 1e-10, 6, free) is not None
    assert len(calls) == len(rows)
    indefinite = np.eye(8)
    indefinite[0, 1] = indefinite[1, 0] = 2.0
    upgrad_rows = np.eye(8).tolist()
    starts = [[i >= 2 for i in range(8)]] + [[True] * 8] * 7  # the first block is definite, the others not
    assert dc_host.project_host(indefinite.tolist(), upgrad_rows, 1e-12, 1e-10, 6, starts) is None


@pytest.mark.parametrize("name", ["upgrad", "dualproj"])
def test_the_warm_hint_does_not_change_the_weights(name):
    """UPGrad/DualProj start each CPU solve from the previous call's free sets. Over a sequence
    of Jacobians (slow drift, then unrelated ones, then a different K) one aggregator's weights
    equal those of a fresh aggregator per call (float32 weights: to 1 ulp-ish, rtol 1e-6)."""
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(6, 40, generator=gen)
    seq = [base + 0.05 * t * torch.randn(6, 40, generator=gen) for t in range(4)]
    seq += [torch.randn(6, 40, generator=gen) for _ in range(3)] + [torch.randn(4, 40, generator=gen)]
    warm = build(name)
    for grads in seq:
        warm(grads)
        fresh = build(name)
        fresh(grads)
        torch.testing.assert_close(warm.weights, fresh.weights, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    "b, k, expected",
    [(1, 8, False), (1, 9, True), (25, 4, False), (26, 4, True), (5, 5, False), (7, 7, True), (10, 10, True)],
)
def test_the_active_set_steps_go_first_exactly_above_400_free_sets(b, k, expected):
    """The routing of ENUMERATE_MAX_SETS (docs: enumeration up to B·2^K = 400 sets, where it costs
    at most ~0.05 ms more and keeps its tie rule): one CPU Gramian with B right-hand sides goes
    to the active-set steps first iff B·2^K > 400; a batch of Gramians never does (finding its
    unfinished problems would need per-problem reads)."""
    g_hat, c = torch.eye(k, dtype=torch.float64), torch.zeros(b, k, dtype=torch.float64)
    assert dc._active_set_first(g_hat, c) is expected
    assert dc._active_set_first(g_hat.expand(2, k, k), c.expand(2, b, k)) is False
