"""The iterative min-norm solver (K > 6: the active-set start or FISTA from a warm start, then
Wolfe's steps) against quadprog's QP solution, on rank-deficient Gramians whose row norms
spread over 1e3: starts from the simplex's centre, a vertex and random points, so Wolfe's
minor steps (a weight driven to 0 and its row dropped) are taken. A solve must end at the
optimum and say so; one that stops early must say that instead."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import quadprog
import torch

from jacobians import randomly_spread

mn = importlib.import_module("morl.solvers.min_norm")  # morl.solvers.min_norm is also the function

SEEDS = range(8)


def _gramian(seed: int, k: int, rank: int, spread: float) -> torch.Tensor:
    j = randomly_spread(torch.Generator().manual_seed(1000 * k + seed), k, 40, rank, spread)
    return j @ j.T


def _solves(k: int, spread: float):
    """(seed, start, G, max diag, quadprog's optimum, λ, converged) for every seed, cold and
    from the three starts: rank K/2, norms over 10**spread."""
    for seed in SEEDS:
        gram = _gramian(seed, k, k // 2, spread)
        top, best = float(gram.diagonal().max()), _qp_optimum(gram)
        for start, init in {"cold": None, **_starts(k, seed)}.items():
            lam, ok = mn.min_norm_solve(gram, init=init)
            assert float(lam.min()) >= 0.0 and abs(float(lam.sum()) - 1.0) < 1e-12
            yield seed, start, gram, top, best, lam, ok


def _qp_optimum(gram: torch.Tensor) -> float:
    """min ½λᵀGλ over the simplex by quadprog (G + 1e-10·max diag·I: quadprog needs it
    positive definite; that moves the optimum's value by ≤ 1e-10·max diag)."""
    k = gram.shape[0]
    top = float(gram.diagonal().max())
    g = gram.numpy() / top + 1e-10 * np.eye(k)  # quadprog's tolerances are absolute: G / max diag
    constraints = np.hstack([np.ones((k, 1)), np.eye(k)])
    lam = quadprog.solve_qp(g, np.zeros(k), constraints, np.r_[1.0, np.zeros(k)], meq=1)[0]
    lam = torch.from_numpy(np.clip(lam, 0, None) / np.clip(lam, 0, None).sum())
    return float(0.5 * lam @ gram @ lam)


def _starts(k: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "centre": torch.full((k,), 1.0 / k, dtype=torch.float64),
        "vertex": torch.eye(k, dtype=torch.float64)[seed % k],
        "random": torch.rand(k, generator=gen, dtype=torch.float64),
    }


@pytest.mark.parametrize("k", [8, 16, 24])
@pytest.mark.parametrize("spread", [3.0, 6.0])
def test_iterative_solve_reaches_the_qp_optimum_and_says_converged(k, spread):
    """Rank K/2, row norms over 10**spread, cold and from three starts. Margin: the solver's
    ½λᵀGλ is within 1e-9 · max diag of quadprog's (measured over 30 seeds of each case, 720
    solves: ≤ 3.6e-19 · max diag, every one converged); feasibility to 1e-12."""
    for seed, start, gram, top, best, lam, ok in _solves(k, spread):
        assert bool(ok), (seed, start)
        assert float(0.5 * lam @ gram @ lam) <= best + 1e-9 * top, (seed, start)


@pytest.mark.parametrize("k", [8, 16, 24])
def test_branch_free_route_is_optimal_where_it_says_converged(k, monkeypatch):
    """The route a GPU runs (no flag reads, so no extra Wolfe rounds): a warm-started solve that says
    converged is at the optimum, and nearly all do. Measured over 30 seeds × 3 starts × spreads
    1e3 and 1e6 (K = 16: 180 solves, K = 24: 180): 1 and 3 not converged, each still within
    2e-12 · max diag of the optimum (K = 8: all 180 converged; cold solves, 60 per K: all
    converged and optimal); required here: ≥ 85 % converged over the 64 solves."""
    monkeypatch.setattr(mn, "reads_are_free", lambda t: False)
    converged = 0
    solves = 0
    for spread in (3.0, 6.0):
        for seed, start, gram, top, best, lam, ok in _solves(k, spread):
            solves += 1
            if bool(ok):
                converged += 1
                assert float(0.5 * lam @ gram @ lam) <= best + 1e-9 * top, (seed, start)
    assert converged >= 0.85 * solves


def _wolfe_transcribed(g: np.ndarray, lam: np.ndarray, rounds: int) -> tuple[np.ndarray, bool]:
    """Wolfe's algorithm (1976, "Finding the nearest point in a polytope", steps 1-3) for a
    unit-diagonal Gramian, written from the paper: on the support S take the affine minimiser
    y (y_S ∝ G_SS⁻¹1). If y ≥ 0 it is the new point (major cycle); then the row k of least
    (Gλ)_k enters S when it would shorten d ((Gλ)_k < λᵀGλ), else λ is optimal. If some
    y_i < 0, move λ towards y by θ = min λ_i/(λ_i − y_i) over those rows and drop the row
    that reaches 0 (minor cycle)."""
    support = lam > 0
    for _ in range(rounds):
        s = np.flatnonzero(support)
        y = np.zeros_like(lam)
        y[s] = np.linalg.solve(g[np.ix_(s, s)], np.ones(len(s)))
        y /= y.sum()
        if (y[s] >= 0).all():
            lam = y
            grad = g @ lam
            k = int(np.argmin(np.where(support, np.inf, grad)))
            if support.all() or grad[k] >= lam @ grad - 1e-8 * np.sqrt(lam @ grad):
                return lam, True
            support[k] = True
        else:
            neg = s[y[s] < 0]
            ratios = lam[neg] / (lam[neg] - y[neg])
            theta = min(ratios.min(), 1.0)
            lam = lam + theta * (y - lam)
            lam[neg[np.argmin(ratios)]] = 0.0
            lam = np.clip(lam, 0, None) / np.clip(lam, 0, None).sum()
            support = lam > 0
    return lam, False


def _unit_gramian(seed: int, k: int) -> np.ndarray:
    gen = np.random.default_rng(seed)
    j = gen.standard_normal((k, k + 6)) + 0.8 * gen.standard_normal(k + 6)  # correlated rows: a small min-norm point
    j /= np.linalg.norm(j, axis=1, keepdims=True)
    return j @ j.T


@pytest.mark.parametrize("k", [7, 9, 12])
def test_each_wolfe_round_is_the_papers_step(k):
    """wolfe_steps run for r = 1, 2, ... rounds equals the transcription after r rounds, from
    the simplex's centre (minor cycles first: the affine minimiser on all rows has negative
    weights) and from a vertex (major cycles adding rows), to 1e-10; both end optimal and
    agree on when. Unit-diagonal G with d = 1, no ridge: the solver's system is G itself."""
    minor_seen = 0
    for seed in range(6):
        g = _unit_gramian(seed, k)
        gt = torch.from_numpy(g)
        for lam0 in (np.full(k, 1.0 / k), np.eye(k)[seed % k]):
            for r in range(1, 2 * k + 4):
                want, done_want = _wolfe_transcribed(g, lam0.copy(), r)
                got, done = mn.wolfe_steps(gt, gt, torch.ones(k, dtype=torch.float64), torch.from_numpy(lam0.copy()), 1e-8, r)
                np.testing.assert_allclose(got.numpy(), want, atol=1e-10, err_msg=f"seed {seed}, {r} rounds")
                assert bool(done) == done_want, (seed, r)
                if done_want:
                    break
            assert done_want
            minor_seen += int(np.linalg.solve(g, np.ones(k)).min() < 0)
    assert minor_seen > 0  # the centre starts did take minor cycles


def test_a_batch_of_wolfe_problems_is_solved_as_each_alone():
    """Four problems of different lengths (two take minor cycles with different steps θ at
    once, one major cycles, one finishes at its start) in one batched call: each row of the
    result equals the problem solved alone, round by round (the masks, reductions, θ and the
    per-problem done flags act per problem)."""
    k = 9
    grams = [_unit_gramian(seed, k) for seed in (1, 2, 3, 4)]
    starts = [np.full(k, 1.0 / k), np.full(k, 1.0 / k), np.eye(k)[0], np.full(k, 1.0 / k)]
    starts[3] = _wolfe_transcribed(grams[3], starts[3].copy(), 60)[0]  # already optimal
    g = torch.from_numpy(np.stack(grams))
    lam0 = torch.from_numpy(np.stack(starts))
    for r in (1, 2, 3, 5, 8, 30):
        got, done = mn.wolfe_steps(g, g, torch.ones(4, k, dtype=torch.float64), lam0.clone(), 1e-8, r)
        for i in range(4):
            alone, done_alone = mn.wolfe_steps(g[i], g[i], torch.ones(k, dtype=torch.float64), lam0[i].clone(), 1e-8, r)
            np.testing.assert_allclose(got[i].numpy(), alone.numpy(), atol=1e-12, err_msg=f"problem {i}, {r} rounds")
            assert bool(done[i]) == bool(done_alone), (i, r)
    assert bool(done.all())


def _hard_gramian(seed: int, k: int, rank: int, stationary: bool) -> torch.Tensor:
    """Rank ``rank``, norms over 1e6; ``stationary``: a positive combination of rows is 0."""
    j = randomly_spread(torch.Generator().manual_seed(7919 * k + seed), k, 40, rank, 6.0, stationary)
    return j @ j.T


@pytest.mark.parametrize("k", [7, 10, 16, 24])
def test_cold_solves_of_float32_rank_deficient_and_stationary_gramians(k):
    """The cold path (active-set start, then Wolfe) on float32 Gramians of rank 2 and K/2, with
    and without a Pareto-stationary combination: every solve says converged, is feasible and
    within 4e-6 · max diag of quadprog's optimum for the float64 Gramian (the float32 ridge,
    16 ε ≈ 1.9e-6 of each row's squared norm, and G's own rounding move it by less: measured
    ≤ 4.3e-15 · max diag over 30 seeds, 480 solves, all converged, where the K + 10 Wolfe
    rounds alone left 2 unfinished); a batch of them is solved as each alone."""
    for seed in SEEDS:
        grams = [_hard_gramian(seed, k, rank, st) for rank in (2, k // 2) for st in (False, True)]
        batch = torch.stack(grams).float()
        lam_b, ok_b = mn.min_norm_solve(batch)
        for i, gram in enumerate(grams):
            lam, ok = mn.min_norm_solve(gram.float())
            assert ok.shape == () and bool(ok), (seed, i)
            torch.testing.assert_close(lam_b[i], lam, rtol=0, atol=1e-6)
            assert bool(ok_b[i])
            lam = lam.double()
            assert float(lam.min()) >= 0.0 and abs(float(lam.sum()) - 1.0) < 1e-6
            top = float(gram.diagonal().max())
            assert float(0.5 * lam @ gram @ lam) <= _qp_optimum(gram) + 4e-6 * top, (seed, i)


@pytest.mark.parametrize("k, seed, init", [(24, 19, None), (24, 29, None), (16, 27, "centre"), (24, 12, "vertex"),
                                           (24, 15, "vertex"), (24, 19, "vertex")])
def test_instances_that_need_more_than_k_plus_10_wolfe_rounds(k, seed, init):
    """Found by the 30-seed sweeps above: cold solves of float32 stationary Gramians (rank K/2)
    and warm solves of float64 ones (rank K/2, norms over 1e6) that Wolfe's K + 10 rounds
    leave unfinished; the extra rounds (up to 3K more, on CPU) finish them at the
    optimum."""
    if init is None:
        gram = _hard_gramian(seed, k, k // 2, True)
        lam, ok = mn.min_norm_solve(gram.float())
        lam, tol = lam.double(), 4e-6
    else:
        gram = _gramian(seed, k, k // 2, 6.0)
        lam, ok = mn.min_norm_solve(gram, init=_starts(k, seed)[init])
        tol = 1e-9
    assert bool(ok)
    top = float(gram.diagonal().max())
    assert float(0.5 * lam @ gram @ lam) <= _qp_optimum(gram) + tol * top


def test_flags_are_one_bool_per_problem_on_every_exit():
    """The converged flags are bools of the batch's shape, also where the cold start is already
    the optimum (nearly orthogonal rows: their min-norm weights, ∝ 1/‖g_k‖², are all positive,
    the first exit) and where Wolfe's steps run (one row made to conflict)."""
    gen = torch.Generator().manual_seed(0)
    agree = [torch.randn(8, 400, generator=gen, dtype=torch.float64) for _ in range(3)]
    conflict = [j.clone() for j in agree]
    for j in conflict:
        j[0] = -3.0 * j[1]
    for rows in (agree, conflict):
        grams = torch.stack([j @ j.T for j in rows])
        for gram in (grams, grams[0]):
            lam, ok = mn.min_norm_solve(gram)
            assert ok.dtype == torch.bool and ok.shape == gram.shape[:-2] and bool(ok.all())
