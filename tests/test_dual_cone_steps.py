"""The dual cone's iterative solver (FISTA, then primal active-set steps with minor and arc
steps) on rank-deficient Gramians, against quadprog: right-hand sides of DualProj (the mean),
UPGrad (p_i e_i) and random positive ones, on the CPU route and on the branch-free route a
GPU takes. Every solve must end at the optimum of v ≥ u, min vᵀGv, and say so."""

from __future__ import annotations

import numpy as np
import pytest
import quadprog
import torch

import morl.solvers.dual_cone as dc
from jacobians import randomly_spread

SEEDS = range(6)


def _gramian(seed: int, k: int, rank: int, spread: float) -> torch.Tensor:
    j = randomly_spread(torch.Generator().manual_seed(31 * k + seed), k, 30, rank, spread)
    return j @ j.T


def _right_hand_sides(k: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.cat([torch.full((1, k), 1.0 / k, dtype=torch.float64), torch.eye(k, dtype=torch.float64) / k,
                      torch.rand(2, k, generator=gen, dtype=torch.float64)])


def _qp_values(gram: torch.Tensor, u: torch.Tensor) -> np.ndarray:
    """min vᵀGv over v ≥ u for each row of u, by quadprog on G / max diag + 1e-10·I (positive
    definite; moves each optimum by ≤ 1e-10 · ‖v‖² · max diag)."""
    top = float(gram.diagonal().max())
    g = gram.numpy() / top + 1e-10 * np.eye(gram.shape[0])
    out = []
    for row in u.numpy():
        v = quadprog.solve_qp(g, np.zeros(len(row)), np.eye(len(row)), row)[0]
        out.append(float(v @ gram.numpy() @ v))
    return np.array(out)


@pytest.mark.parametrize("k, rank", [(12, 6), (12, 2), (16, 8)])
@pytest.mark.parametrize("route", ["cpu", "branch_free"])
def test_iterative_projection_is_optimal_and_converged(k, rank, route, monkeypatch):
    """exact_max_k = 0 sends every problem to FISTA + active-set steps (no Python-float rounds:
    PDAS_ROUNDS = 0). Margin: vᵀGv within 1e-9 · max diag · (Σ|u|)² of quadprog's, v ≥ u to
    1e-12 · max|u| (measured over 30 seeds of each case, 2940 projections on each route: all
    converged, ≤ 7.6e-12 of that scale)."""
    monkeypatch.setattr(dc, "PDAS_ROUNDS", 0)
    if route == "branch_free":
        monkeypatch.setattr(dc, "reads_are_free", lambda t: False)
    for seed in SEEDS:
        for spread in (0.0, 3.0):
            gram = _gramian(seed, k, rank, spread)
            u = _right_hand_sides(k, seed)
            v, ok = dc.project_to_dual_cone(gram, u, exact_max_k=0)
            assert bool(ok.all()), (seed, spread)
            assert bool((v >= u - 1e-12 * u.abs().amax()).all())
            top = float(gram.diagonal().max())
            obj = ((v @ gram) * v).sum(-1).numpy()
            slack = 1e-9 * top * u.abs().sum(-1).square().numpy()
            assert (obj <= _qp_values(gram, u) + slack).all(), (seed, spread)


def _steps_transcribed(g: np.ndarray, c: np.ndarray, z: np.ndarray, free: np.ndarray, tol: float, rounds: int):
    """The primal active-set steps as the docstring of active_set_steps states them (Lawson &
    Hanson's NNLS steps with Bertsekas' projection arc), for one right-hand side: y minimises
    zᵀĜz with z_A = c_A on the free set F. If y ≥ c on F (major), z = y and every active row
    whose multiplier (Ĝy)_k is below −tol·scale is freed (none: optimal). Otherwise (minor)
    move towards y until the first free row reaches its bound (θ = min (z−c)/(z−y) over rows
    with y < c; those at the minimum are fixed), and take instead the lowest of the arc points
    max(z + α(y − z), c), α = 1, 1/2, ..., 1/16, where it is strictly lower."""
    k = len(c)
    def obj(x):
        return float(x @ g @ x)
    for _ in range(rounds):
        y = c.copy()
        f = np.flatnonzero(free)
        a = np.flatnonzero(~free)
        if len(f):
            y[f] = np.linalg.solve(g[np.ix_(f, f)], -g[np.ix_(f, a)] @ c[a])
        scale = max(np.abs(c).max(), np.sqrt(max(obj(y), 0.0)))
        if (y[f] >= c[f] - 1e-12 * scale).all():
            z = np.maximum(y, c)
            mu = g @ y
            entering = (~free) & (mu < -tol * scale)
            if not entering.any():
                return z, free, True
            free = free | entering
            continue
        blocked = free & (y < c)
        ratio = np.full(k, np.inf)
        ratio[blocked] = (z[blocked] - c[blocked]) / (z[blocked] - y[blocked])
        theta = min(max(ratio.min(), 0.0), 1.0)
        z_new = np.maximum(z + theta * (y - z), c)
        z_new[ratio <= theta] = c[ratio <= theta]
        free_new = free & (ratio > theta)
        best = obj(z_new)
        for alpha in dc.ARC_STEPS:
            z_arc = np.maximum(z + alpha * (y - z), c)
            if obj(z_arc) < best:
                z_new, free_new, best = z_arc, free & (z_arc > c), obj(z_arc)
        z, free = z_new, free_new
    return z, free, False


def _unit_problem(seed: int, k: int, b: int):
    gen = np.random.default_rng(seed)
    j = gen.standard_normal((k, k + 3)) + 0.5 * gen.standard_normal(k + 3)
    j /= np.linalg.norm(j, axis=1, keepdims=True)
    c = gen.uniform(-0.2, 1.0, size=(b, k))  # mostly positive bounds: the free minimiser 0 violates them
    return j @ j.T, c


@pytest.mark.parametrize("k", [5, 8, 12])
def test_each_active_set_round_is_the_documented_step(k):
    """active_set_steps run for r = 1, 2, ... rounds from z = c + 1 with every row free (the
    free minimiser is 0, below the positive bounds: minor and arc steps first) equals the
    transcription after r rounds, to 1e-10; three right-hand sides in one batch, each against
    its own transcription (per-problem θ, masks and done flags)."""
    for seed in range(5):
        g, c = _unit_problem(seed, k, 3)
        gt, ct = torch.from_numpy(g), torch.from_numpy(c)
        for r in range(1, 3 * k):
            z, done = dc.active_set_steps(gt, ct, ct + 1.0, torch.ones(3, k, dtype=torch.bool), 1e-10, r)
            finished = []
            for i in range(3):
                want, _, done_want = _steps_transcribed(g, c[i], c[i] + 1.0, np.ones(k, dtype=bool), 1e-10, r)
                np.testing.assert_allclose(z[i].numpy(), want, atol=1e-10, err_msg=f"seed {seed}, row {i}, {r} rounds")
                assert bool(done[i]) == done_want, (seed, i, r)
                finished.append(done_want)
            if all(finished):
                break
        assert all(finished), seed


@pytest.mark.parametrize("k", [5, 12])
def test_a_batch_of_gramians_is_projected_as_each_alone(k, monkeypatch):
    """Four Gramians [4, K, K] (rank K/2 + 1 and K) with their own right-hand sides [4, B, K]
    through the iterative solver (exact_max_k = 0, no Python-float rounds, so one Gramian takes
    the same route): each member reaches its own call's objective vᵀGv (v is not unique for
    singular G) to 1e-12 · max diag · (Σ|u|)², is feasible and converged (the masks and
    steps of the active-set phase act per problem along every batch dimension)."""
    monkeypatch.setattr(dc, "PDAS_ROUNDS", 0)
    for rank in (k // 2 + 1, k):
        grams = torch.stack([_gramian(seed, k, rank, 1.0) for seed in range(4)])
        u = torch.stack([torch.eye(k, dtype=torch.float64) / k] * 2 + [_right_hand_sides(k, 2)[:k], _right_hand_sides(k, 3)[:k]])
        v, ok = dc.project_to_dual_cone(grams, u, exact_max_k=0)
        assert bool(ok.all()) and bool((v >= u - 1e-12).all())
        for i in range(4):
            alone, _ = dc.project_to_dual_cone(grams[i], u[i], exact_max_k=0)
            top = float(grams[i].diagonal().max())
            scale = top * u[i].abs().sum(-1).square()
            obj, obj_alone = ((v[i] @ grams[i]) * v[i]).sum(-1), ((alone @ grams[i]) * alone).sum(-1)
            assert bool(((obj - obj_alone).abs() <= 1e-12 * scale).all()), (rank, i)


def test_the_converged_flags_of_a_batch_have_one_entry_per_problem():
    """[N, B] flags for N Gramians with B right-hand sides each, on the exact (K ≤ 10) and the
    iterative path: the documented shape, all True."""
    grams = torch.stack([_gramian(seed, 4, 4, 0.0) for seed in range(3)])
    u = torch.rand(3, 2, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for exact_max_k in (10, 0):
        v, ok = dc.project_to_dual_cone(grams, u, exact_max_k=exact_max_k)
        assert v.shape == (3, 2, 4) and ok.shape == (3, 2) and bool(ok.all())
