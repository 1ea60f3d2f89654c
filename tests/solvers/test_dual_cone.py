"""morl.solvers.dual_cone against independent QP solvers (quadprog, and cvxpy for rank-deficient
Gramians), a transcription of the documented active-set step, and hand-computed projections.

The problem: v = argmin_{v ≥ u} vᵀGv. quadprog (Goldfarb-Idnani dual active set) needs G
positive definite, so it gets full-rank Gramians; cvxpy (Clarabel, interior point) solves the
rank-deficient ones as min ‖Jᵀv‖² s.t. v ≥ u, and since v is not unique there, the
projections Jᵀv are compared. Both the exact enumeration (K ≤ 10) and the iterative solver
(forced with ``exact_max_k=0``, and by K > 10) are checked, with u of any sign.
"""

import cvxpy as cp
import numpy as np
import pytest
import quadprog
import torch
from jacobians import randomly_spread

from morl.solvers.dual_cone import active_set_steps, project_to_dual_cone


def _problem(seed, k, d, rank, shift=0.5):
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, rank, generator=gen, dtype=torch.float64) @ torch.randn(
        rank, d, generator=gen, dtype=torch.float64
    )
    j = (
        j + shift * torch.randn(k, 1, generator=gen, dtype=torch.float64) * j[:1]
    )  # shared direction: conflicts and agreements
    u = torch.randn(3, k, generator=gen, dtype=torch.float64)
    u = torch.cat([torch.eye(k, dtype=torch.float64)[: min(k, 3)], u.abs(), u])  # UPGrad's, positive, any sign
    return j, u


def _quadprog(gram: np.ndarray, u: np.ndarray) -> np.ndarray:
    # quadprog: min ½xᵀGx − aᵀx s.t. Cᵀx ≥ b
    return quadprog.solve_qp(gram, np.zeros(len(u)), np.eye(len(u)), u)[0]


def _quadprog_error(gram: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> float:
    """max |v − v_qp| / max(1, |v_qp|), quadprog on G / max diag (the same minimiser)."""
    g_n = (gram / gram.diagonal().max()).numpy()
    ref = np.stack([_quadprog(g_n, row.numpy()) for row in u])
    return float((np.abs(v.numpy() - ref) / np.maximum(1.0, np.abs(ref))).max())


def _cvxpy_projection(j: np.ndarray, u: np.ndarray) -> np.ndarray:
    v = cp.Variable(len(u))
    cp.Problem(cp.Minimize(cp.sum_squares(j.T @ v)), [v >= u]).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12
    )
    return j.T @ v.value


@pytest.mark.parametrize(
    "k, exact_max_k", [(1, 10), (3, 10), (6, 10), (10, 10), (3, 0), (6, 0), (10, 0), (12, 10), (30, 10)]
)
def test_full_rank_projection_matches_quadprog(k, exact_max_k):
    """Measured over seeds 0..4 (K up to 50): max |v − v_qp| / max(1, |v_qp|) = 7.3e-10, at
    K = 11 where cond(G) = 1.8e6 (ε·cond: either solver's rounding); bound 5e-9. The
    projections conflict by at most 6.9e-12 relative (the ridge ρ = 1e-12 times v); bound 1e-10."""
    for seed in range(3):
        j, u = _problem(seed, k, k + 5, k)
        gram = j @ j.T
        v, converged = project_to_dual_cone(gram, u, exact_max_k=exact_max_k)
        assert bool(converged.all())
        assert _quadprog_error(gram, u, v) <= 5e-9
        x = v @ j  # projections Jᵀv, each in the dual cone: J x ≥ 0
        norms = j.norm(dim=1)
        assert float(((j @ x.T) / (norms[:, None] * norms.max())).min()) >= -1e-10
        assert bool((v >= u - 1e-12).all())


def test_a_single_right_hand_side_at_k_300_matches_quadprog():
    """DualProj's problem (u = 1/K) at K = 300 on a full-rank Gramian (D = 310): the iterative
    solver ends at quadprog's optimum (bound as above)."""
    j, _ = _problem(0, 300, 310, 300)
    gram = j @ j.T
    u = torch.full((1, 300), 1.0 / 300, dtype=torch.float64)
    v, converged = project_to_dual_cone(gram, u)
    assert bool(converged.all())
    assert _quadprog_error(gram, u, v) <= 5e-9


@pytest.mark.parametrize("k, rank, exact_max_k", [(4, 2, 10), (8, 3, 10), (8, 3, 0), (12, 5, 10), (30, 10, 10)])
def test_rank_deficient_projection_matches_cvxpy(k, rank, exact_max_k):
    """v is not unique when G is singular; the projection Jᵀv is. Measured over seeds 0..4:
    ‖Jᵀv − Jᵀv_cvx‖ / max‖g‖ ≤ 2.3e-9; bound 2e-8."""
    for seed in range(2):
        j, u = _problem(seed, k, 20, rank)
        v, converged = project_to_dual_cone(j @ j.T, u, exact_max_k=exact_max_k)
        assert bool(converged.all())
        jn = j.numpy()
        for row, v_row in zip(u.numpy(), v.numpy()):
            ref = _cvxpy_projection(jn, row)
            assert float(np.linalg.norm(jn.T @ v_row - ref) / np.linalg.norm(jn, axis=1).max()) <= 2e-8


@pytest.mark.parametrize("k, rank", [(12, 6), (12, 2), (16, 8)])
def test_iterative_projection_of_spread_rows_reaches_quadprogs_objective(k, rank):
    """Rows whose norms spread over 1e±3: vᵀGv within 1e-9 · max diag · (Σ|u|)² of quadprog's
    (on G / max diag + 1e-10·I, which moves each optimum by ≤ 1e-10 · ‖v‖²), v ≥ u to
    1e-12 · max|u| (measured over 30 seeds: ≤ 7.6e-12 of that scale)."""
    for seed in range(3):
        j = randomly_spread(torch.Generator().manual_seed(31 * k + seed), k, 30, rank, 3.0)
        gram = j @ j.T
        gen = torch.Generator().manual_seed(seed)
        u = torch.cat(
            [
                torch.full((1, k), 1.0 / k, dtype=torch.float64),
                torch.eye(k, dtype=torch.float64) / k,
                torch.rand(2, k, generator=gen, dtype=torch.float64),
            ]
        )
        v, ok = project_to_dual_cone(gram, u, exact_max_k=0)
        assert bool(ok.all()) and bool((v >= u - 1e-12 * u.abs().amax()).all())
        top = float(gram.diagonal().max())
        g = gram.numpy() / top + 1e-10 * np.eye(k)
        ref = np.array(
            [
                float(x @ gram.numpy() @ x)
                for x in (quadprog.solve_qp(g, np.zeros(k), np.eye(k), r)[0] for r in u.numpy())
            ]
        )
        obj = ((v @ gram) * v).sum(-1).numpy()
        assert (obj <= ref + 1e-9 * top * u.abs().sum(-1).square().numpy()).all()


def test_hand_computed_projection():
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


def test_the_gramians_scale_does_not_change_v():
    """v is the same for G·1e-20 and G·1e20 (the solve runs on the equilibrated G)."""
    j, u = _problem(0, 8, 9, 8)
    gram = j @ j.T
    v = project_to_dual_cone(gram, u)[0]
    for s in (1e-20, 1e20):
        torch.testing.assert_close(project_to_dual_cone(gram * s, u)[0], v, rtol=1e-9, atol=1e-9)


def test_a_zero_row_changes_no_other_projection_and_batches_project_each_member():
    """A zero row changes nothing else (same projections as without it) and keeps v_k = u_k
    where u_k ≥ 0; leading dims batch, each Gramian at its own scale."""
    j, u = _problem(0, 5, 8, 5)
    j[2] = 0
    gram = j @ j.T
    v, _ = project_to_dual_cone(gram, u)
    rest = [0, 1, 3, 4]
    v_rest, _ = project_to_dual_cone(gram[rest][:, rest], u[:, rest])
    torch.testing.assert_close(v[:, rest] @ j[rest], v_rest @ j[rest], rtol=0, atol=1e-10)
    keep = u[:, 2] >= 0
    torch.testing.assert_close(v[keep, 2], u[keep, 2], rtol=0, atol=1e-12)
    batched, ok = project_to_dual_cone(torch.stack([gram, 2 * gram]), torch.stack([u, u]))
    assert ok.shape == (2, u.shape[0]) and bool(ok.all())
    torch.testing.assert_close(batched[0], v, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(batched[1], v, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("k", [5, 12])
def test_a_batch_of_gramians_reaches_each_members_optimum(k):
    """Four rank-deficient Gramians [4, K, K] with their own right-hand sides through the
    iterative solver: each member's objective vᵀGv equals quadprog's on that member (G / max
    diag + 1e-10·I) to 1e-9 · max diag · (Σ|u|)², feasible and converged ([4, B] flags)."""
    grams = torch.stack(
        [(j := randomly_spread(torch.Generator().manual_seed(s), k, 30, k // 2 + 1, 1.0)) @ j.T for s in range(4)]
    )
    u = torch.rand(4, 3, k, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    v, ok = project_to_dual_cone(grams, u, exact_max_k=0)
    assert ok.shape == (4, 3) and bool(ok.all()) and bool((v >= u - 1e-12).all())
    for i in range(4):
        top = float(grams[i].diagonal().max())
        g = grams[i].numpy() / top + 1e-10 * np.eye(k)
        for b in range(3):
            x = quadprog.solve_qp(g, np.zeros(k), np.eye(k), u[i, b].numpy())[0]
            ref = float(x @ grams[i].numpy() @ x)
            assert float(v[i, b] @ grams[i] @ v[i, b]) <= ref + 1e-9 * top * float(u[i, b].sum()) ** 2


def _equilibrated(gram):
    d = gram.diagonal().sqrt()
    return gram / (d[:, None] * d[None, :]) + 1e-12 * torch.eye(len(d), dtype=gram.dtype), d


def test_too_few_active_set_steps_are_reported():
    """One active-set step from the all-active start cannot reach the optimum of a problem
    whose optimum frees several rows: ``converged`` says so (the aggregators count it)."""
    j, _ = _problem(1, 12, 15, 12)
    g_hat, d = _equilibrated(j @ j.T)
    c = torch.eye(12, dtype=torch.float64) * d
    _, converged = active_set_steps(g_hat, c, c, torch.zeros_like(c, dtype=torch.bool), tol=1e-8, rounds=1)
    _, converged_long = active_set_steps(g_hat, c, c, torch.zeros_like(c, dtype=torch.bool), tol=1e-8, rounds=40)
    assert not bool(converged.all()) and bool(converged_long.all())


def _steps_transcribed(g, c, z, free, tol, rounds):
    """The primal active-set steps as the docstring of active_set_steps states them, for one
    right-hand side: y minimises zᵀĜz with z_A = c_A on the free set F. If y ≥ c on F (major),
    z = y and every active row whose multiplier (Ĝy)_k is below −tol·scale is freed (none:
    optimal). Otherwise (minor) move towards y until the first free row reaches its bound
    (θ = min (z−c)/(z−y) over rows with y < c; those at the minimum are fixed), and take
    instead the lowest of the arc points max(z + α(y − z), c), α = 1, 1/2, ..., 1/16."""
    k = len(c)

    def obj(x):
        return float(x @ g @ x)

    for _ in range(rounds):
        y = c.copy()
        f, a = np.flatnonzero(free), np.flatnonzero(~free)
        if len(f):
            y[f] = np.linalg.solve(g[np.ix_(f, f)], -g[np.ix_(f, a)] @ c[a])
        scale = max(np.abs(c).max(), np.sqrt(max(obj(y), 0.0)))
        if (y[f] >= c[f] - 1e-12 * scale).all():
            z = np.maximum(y, c)
            entering = (~free) & (g @ y < -tol * scale)
            if not entering.any():
                return z, True
            free = free | entering
            continue
        blocked = free & (y < c)
        ratio = np.full(k, np.inf)
        ratio[blocked] = (z[blocked] - c[blocked]) / (z[blocked] - y[blocked])
        theta = min(max(ratio.min(), 0.0), 1.0)
        z_new = np.maximum(z + theta * (y - z), c)
        z_new[ratio <= theta] = c[ratio <= theta]
        free_new, best = free & (ratio > theta), obj(z_new)
        for alpha in (1.0, 0.5, 0.25, 0.125, 0.0625):
            z_arc = np.maximum(z + alpha * (y - z), c)
            if obj(z_arc) < best:
                z_new, free_new, best = z_arc, free & (z_arc > c), obj(z_arc)
        z, free = z_new, free_new
    return z, False


@pytest.mark.parametrize("k", [5, 12])
def test_each_active_set_round_is_the_documented_step(k):
    """active_set_steps for r = 1, 2, ... rounds from z = c + 1 with every row free (the free
    minimiser 0 violates the mostly positive bounds: minor and arc steps first) equals the
    transcription after r rounds, to 1e-10; three right-hand sides in one batch."""
    for seed in range(3):
        gen = np.random.default_rng(seed)
        j = gen.standard_normal((k, k + 3)) + 0.5 * gen.standard_normal(k + 3)
        j /= np.linalg.norm(j, axis=1, keepdims=True)
        g, c = j @ j.T, gen.uniform(-0.2, 1.0, size=(3, k))
        gt, ct = torch.from_numpy(g), torch.from_numpy(c)
        for r in range(1, 3 * k):
            z, done = active_set_steps(gt, ct, ct + 1.0, torch.ones(3, k, dtype=torch.bool), 1e-10, r)
            wants = [_steps_transcribed(g, c[i], c[i] + 1.0, np.ones(k, dtype=bool), 1e-10, r) for i in range(3)]
            for i, (want, done_want) in enumerate(wants):
                np.testing.assert_allclose(z[i].numpy(), want, atol=1e-10, err_msg=f"seed {seed}, row {i}, {r} rounds")
                assert bool(done[i]) == done_want, (seed, i, r)
            if all(w[1] for w in wants):
                break
        assert all(w[1] for w in wants), seed
