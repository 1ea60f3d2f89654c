"""CAGrad's exact dual (support enumeration) against the iterative solver and cvxpy."""

import cvxpy as cp
import numpy as np
import pytest
import torch

from morl.aggregators.cagrad import cagrad_dual_exact, cagrad_dual_solve, cagrad_dual_weights


def _dual_objective(gram: torch.Tensor, w: torch.Tensor, c: float) -> float:
    b = gram.mean(-1)
    r = c * b.mean().clamp(min=0).sqrt()
    return float((w * b).sum() + r * (w @ gram @ w).clamp(min=0).sqrt())


def _instances(seed: int):
    """Random, correlated, rank-deficient (D < K), repeated-row, zero-row and all-opposed Gramians."""
    gen = torch.Generator().manual_seed(seed)
    for i in range(40):
        k = 2 + i % 9
        d = (3, k, 40)[i % 3]
        j = torch.randn(k, d, generator=gen, dtype=torch.float64) + (0.0, 0.5, 2.0)[i % 3] * torch.randn(1, d, generator=gen, dtype=torch.float64)
        if i % 5 == 0:
            j[1] = j[0]
        if i % 7 == 0:
            j[-1] = 0.0
        gram = j @ j.T
        yield gram / gram.diagonal().max()


@pytest.mark.parametrize("c", [0.1, 0.5, 0.9])
def test_exact_dual_is_never_worse_than_the_iterative_solver(c):
    for gram in _instances(0):
        _, w_exact = cagrad_dual_exact(gram, c)
        _, w_iter = cagrad_dual_weights(gram, c, max_iter=3000, tol=1e-14)
        assert w_exact.min() >= 0 and abs(float(w_exact.sum()) - 1) < 1e-12
        assert _dual_objective(gram, w_exact, c) <= _dual_objective(gram, w_iter, c) + 1e-7


@pytest.mark.parametrize("k", [3, 6, 10])
def test_exact_dual_matches_cvxpy(k):
    gen = torch.Generator().manual_seed(k)
    j = torch.randn(k, 4 * k, generator=gen, dtype=torch.float64) + 0.4 * torch.randn(1, 4 * k, generator=gen, dtype=torch.float64)
    gram = j @ j.T
    gram = gram / gram.diagonal().max()
    _, w = cagrad_dual_exact(gram, 0.9)
    jn = j.numpy() / np.sqrt(float(torch.diagonal(j @ j.T).max()))
    g0 = jn.mean(0)
    x = cp.Variable(k)
    problem = cp.Problem(cp.Minimize(x @ (jn @ g0) + 0.9 * np.linalg.norm(g0) * cp.norm(jn.T @ x)), [x >= 0, cp.sum(x) == 1])
    problem.solve()
    assert abs(_dual_objective(gram, w, 0.9) - problem.value) <= 1e-6
    assert _dual_objective(gram, w, 0.9) <= problem.value + 1e-9 or np.allclose(w.numpy(), x.value, atol=1e-4)


def test_c_zero_and_a_single_task_give_finite_weights():
    gram = torch.tensor([[1.0, -0.5], [-0.5, 0.8]], dtype=torch.float64)
    weights, w = cagrad_dual_exact(gram, 0.0)
    torch.testing.assert_close(weights, torch.full((2,), 0.5, dtype=torch.float64))  # c = 0: the mean
    assert torch.isfinite(w).all()
    weights, w = cagrad_dual_exact(torch.ones(1, 1, dtype=torch.float64), 0.5)
    torch.testing.assert_close(w, torch.ones(1, dtype=torch.float64))
    torch.testing.assert_close(weights, torch.full((1,), 1.5, dtype=torch.float64))  # g0 + c‖g0‖ g/‖g‖


@pytest.mark.parametrize("c", [0.1, 0.5, 0.9])
def test_active_set_solver_reaches_the_exact_dual(c):
    """The path CAGrad takes for K > 6 (stationary point on all rows, negative weights dropped,
    active-set steps, enumeration for what they leave) against the enumeration, over 5 seeds
    of random, rank-deficient, repeated-row and zero-row Gramians (600 solves, K = 2..10).
    Measured worst excess objective 2.2e-16, all converged (with FISTA as the fallback it was
    1.6e-8, and 7.4e-5 on 3 unconverged solves). Bounds 1e-7 / 2e-4 (FISTA's, kept for K > 10
    callers of the same function)."""
    for seed in range(5):
        for gram in _instances(seed):
            _, w_exact = cagrad_dual_exact(gram, c)
            _, w, converged = cagrad_dual_solve(gram, c)
            assert w.min() >= 0 and abs(float(w.sum()) - 1) < 1e-12
            excess = _dual_objective(gram, w, c) - _dual_objective(gram, w_exact, c)
            assert excess <= (1e-7 if bool(converged) else 2e-4)
            assert bool(converged)  # K ≤ 10: what the active-set steps leave is enumerated


@pytest.mark.parametrize("c", [0.5, 0.9, 2.0])
def test_active_set_steps_finish_what_the_start_leaves(c):
    """The active-set steps (K ≤ 10 on the CPU) against the enumeration over the 200 Gramians
    of seeds 0-4: every entry they call done is optimal (measured excess ≤ 6.5e-16 over 1400
    solves, bound 1e-12), and they finish more than the dropped-negatives start alone
    (measured +25..+44 of 200 for each c and each of three groups of 5 seeds; bound +15)."""
    from morl.aggregators.cagrad import EPS, _active_set_steps, _dropped_negatives_start, _dual_terms, _exact_gradient
    from morl.solvers.min_norm import RIDGE
    from morl.solvers.simplex_descent import fw_gap

    start_done = steps_done = 0
    for seed in range(5):
        for gram in _instances(seed):
            g, b, r, _ = _dual_terms(gram, c)
            tol = 1e-10 * (b.abs().amax(-1) + r.squeeze(-1) + EPS)
            w0 = _dropped_negatives_start(g, b, r, gram.shape[-1])
            start_done += bool(fw_gap(w0, _exact_gradient(g, b, r, w0)) <= tol)
            w, done = _active_set_steps(g, b, r, w0, tol, rounds=gram.shape[-1] + 10)
            steps_done += bool(done)
            if bool(done):
                _, w_exact = cagrad_dual_exact(gram, c)
                assert _dual_objective(gram, w, c) - _dual_objective(gram, w_exact, c) <= 1e-12
                assert w.min() >= 0 and abs(float(w.sum()) - 1) < 1e-12
    assert steps_done >= start_done + 15, (start_done, steps_done)


@pytest.mark.parametrize("c", [1.5, 2.0])
def test_active_set_steps_finish_every_problem_with_a_nonzero_optimum_when_c_exceeds_1(c):
    """For c > 1 the dual is bounded on every support's affine hull (|g0·g_u| ≤ ‖g0‖‖g_u‖ <
    c‖g0‖‖g_u‖), so the steps must end at the optimum unless ‖g_w*‖ = 0, where the objective is
    not differentiable and the gap check cannot certify it (there the enumeration takes over).
    Measured: 296 of 296 such problems finished over seeds 0-9, for c = 1.5, 2 and 5."""
    from morl.aggregators.cagrad import EPS, _active_set_steps, _dropped_negatives_start, _dual_terms
    from morl.solvers.min_norm import RIDGE

    checked = 0
    for seed in range(5):
        for gram in _instances(seed):
            _, w_exact = cagrad_dual_exact(gram, c)
            if float(w_exact @ gram @ w_exact) <= 1e-8:
                continue
            g, b, r, _ = _dual_terms(gram, c)
            tol = 1e-10 * (b.abs().amax(-1) + r.squeeze(-1) + EPS)
            w, done = _active_set_steps(g, b, r, _dropped_negatives_start(g, b, r, gram.shape[-1]), tol, gram.shape[-1] + 10)
            assert bool(done)
            assert _dual_objective(gram, w, c) - _dual_objective(gram, w_exact, c) <= 1e-12
            checked += 1
    assert checked >= 140  # 148 of the 200 problems have ‖g_w*‖² > 1e-8


@pytest.mark.parametrize("c", [0.5, 2.0])
def test_a_batch_of_gramians_is_solved_as_each_one_alone(c):
    """[B, K, K] through the K ≤ 10 path (start, active-set steps, enumeration for the rest)
    and the K = 12 path (start, FISTA, support solve) gives each problem's own answer: the
    masks, reductions and gathers keep the batch apart."""
    gen = torch.Generator().manual_seed(12)
    jacobians = torch.randn(6, 12, 30, generator=gen, dtype=torch.float64) + torch.randn(6, 1, 30, generator=gen, dtype=torch.float64)
    gram_12 = jacobians @ jacobians.mT
    for k in (8, 10, 12):
        grams = [gram for seed in range(3) for gram in _instances(seed) if gram.shape[-1] == k] or list(gram_12)
        batch = torch.stack(grams)
        weights, w, converged = cagrad_dual_solve(batch, c)
        assert weights.shape == w.shape == (len(grams), k) and converged.shape == (len(grams),)
        # K ≤ 10: exact either way. K = 12: FISTA's stopping decisions sit on rounding (bmm
        # against mm), so within its accuracy: measured ≤ 2.5e-7 over seeds 10-29, bound 1e-5.
        atol = 1e-12 if k <= 10 else 1e-5
        for i, gram in enumerate(grams):
            weights_i, w_i, converged_i = cagrad_dual_solve(gram, c)
            torch.testing.assert_close(w[i], w_i, rtol=0, atol=atol)
            torch.testing.assert_close(weights[i], weights_i, rtol=0, atol=atol)
            assert bool(converged[i]) == bool(converged_i)  # each member's own certificate
        assert bool(converged.all())  # well-posed float64 problems: every solve certified


@pytest.mark.parametrize("c", [0.5, 0.9, 2.0])
def test_each_active_set_round_stays_feasible_and_never_raises_the_dual_objective(c):
    """The active-set method's invariant: every round keeps w on the simplex, supported inside
    the support, and does not increase the (convex) dual objective -- a major step moves to the
    minimiser on the support's affine hull, a minor step part of the way there. The objective
    is the one the steps minimise: G with the solver's relative ridge (G + ρ·diag G, ρ = 1e-12).
    Near g_w = 0 (rank-deficient Gramians, where the optimum has ‖g_w‖² ~ 1e-13) r‖g_w‖ is only
    known to r·sqrt(rounding of wᵀGw): measured increases up to 1.3e-7 of the problem's scale
    max|b| + r, all at ‖g_w‖² < 3e-12 (seeds 0-19, c = 0.1, 0.5, 0.9, 2; 800 problems each).
    Slack: 1e-8 of the scale plus r·sqrt(64 K ε) (2.7e-7 r at K = 5). The problems of one K
    run as one batch."""
    from morl.aggregators.cagrad import EPS, _active_set_round, _dropped_negatives_start, _dual_terms
    from morl.solvers.min_norm import RIDGE

    minor_steps = 0
    for k in range(2, 11):  # each K as one batch: the rounds' masks and reductions keep problems apart
        gram = torch.stack([gram for seed in range(3) for gram in _instances(seed) if gram.shape[-1] == k])
        g, b, r, _ = _dual_terms(gram, c)
        tol = 1e-10 * (b.abs().amax(-1) + r.squeeze(-1) + EPS)
        w = _dropped_negatives_start(g, b, r, gram.shape[-1])
        support, done, stuck = w > 0, torch.zeros_like(tol, dtype=torch.bool), torch.zeros_like(tol, dtype=torch.bool)
        g_ridged = g + RIDGE * torch.diag_embed(torch.diagonal(g, dim1=-2, dim2=-1))

        def ridged_objective(w):
            quad = (w.unsqueeze(-2) @ g_ridged @ w.unsqueeze(-1)).squeeze(-1).squeeze(-1)
            return (w * b).sum(-1) + r.squeeze(-1) * quad.clamp(min=0).sqrt()

        objective, scale = ridged_objective(w), b.abs().amax(-1) + r.squeeze(-1)
        slack = 1e-8 * scale + r.squeeze(-1) * (64 * k * torch.finfo(torch.float64).eps) ** 0.5
        for _ in range(k + 10):
            old_support = support
            w, support, done, stuck = _active_set_round(g, b, r, w, support, done, stuck, tol)
            assert w.min() >= 0 and (w.sum(-1) - 1).abs().max() < 1e-12
            assert bool(((w > 0) <= support).all())
            minor_steps += int(((support & ~old_support).sum(-1) == 0).logical_and((old_support & ~support).any(-1)).sum())
            new = ridged_objective(w)
            assert bool((new <= objective + slack).all()), (objective - new).min()
            objective = new
            if bool((done | stuck).all()):
                break
    assert minor_steps >= 1  # the invariant was checked on minor steps too


@pytest.mark.parametrize("c", [0.5, 2.0])
def test_the_duality_gap_certifies_the_optimum_and_nothing_far_from_it(c):
    """Weak duality (w·b + r‖g_w‖ ≥ min_i g_i·d for every d in the ball): the exact dual optimum
    and its primal weights are certified; the uniform w, wherever its objective is 1e-3 of the
    scale above the optimum's (hand formula, unsmoothed), is not. Over the 40 Gramians of seed 0:
    every optimum certified, and the uniform w was that far off on all 40 for both c (bound 20).
    The primal step is shortened to stay inside the ball under G's rounding (primal_weights), so
    an exact optimum can miss the 1e-10 certificate by that much: over seeds 0-59 (4800
    solves) 9 did, at most 1 per seed, all at c = 2, their gap ≤ 4.9e-8 of the scale; bounds 2
    per seed and 1e-6. Flipping the sign of r‖g_w‖ in the dual value, or of the rounding
    allowance, fails this."""
    from morl.aggregators.cagrad import _certified, _dual_terms, _unsmoothed, primal_weights

    checked = missed = 0
    for gram in _instances(0):
        g, b, r, ridge = _dual_terms(gram, c)
        tol = 1e-10 * (b.abs().amax(-1) + r.squeeze(-1))
        _, w_star = cagrad_dual_exact(gram, c)
        out = primal_weights(g, r, w_star, c, ridge, gram.dtype)
        if not bool(_certified(g, b, r, w_star, out, ridge, tol)):
            missed += 1
            gap = float(_unsmoothed(g, b, r, w_star)) - float((g @ out).min())
            assert gap <= 1e-6 * float(b.abs().max() + r), gap
        uniform = torch.full_like(w_star, 1.0 / len(w_star))
        if _dual_objective(gram, uniform, c) - _dual_objective(gram, w_star, c) > 1e-3 * float(b.abs().max() + r):
            assert not bool(_certified(g, b, r, uniform, primal_weights(g, r, uniform, c, ridge, gram.dtype), ridge, tol))
            checked += 1
    assert checked >= 20 and missed <= 2, (checked, missed)


@pytest.mark.parametrize("c", [0.5, 0.9, 2.0])
@pytest.mark.usefixtures("cagrad_steps_off")
def test_fista_alone_reaches_the_optimum_where_the_active_set_steps_do_not_finish(c):
    """Where the active-set steps do not finish (they can cycle on rank-deficient Gramians), the
    answer is FISTA's on the dual, then the exact solve on its support and, for c ≥ 1, the
    min-norm candidate. With the steps switched off, that fallback alone must reach the exact
    dual optimum (enumeration, K = 12) and say so, alone and as one batch, on four K = 12
    Gramians (full rank and rank 6, with and without a shared component). Measured over
    generator seeds 0-19 (240 solves): excess ≤ 3.3e-15 of the dual value's scale, all
    converged; bound 1e-9."""
    gen = torch.Generator().manual_seed(12)
    grams = []
    for rank in (12, 6):
        for shift in (0.0, 0.5):
            j = torch.randn(12, rank, generator=gen, dtype=torch.float64) @ torch.randn(rank, 30, generator=gen, dtype=torch.float64)
            j = j + shift * torch.randn(1, 30, generator=gen, dtype=torch.float64)
            g = j @ j.T
            grams.append(g / g.diagonal().max())
    _, w_batch, converged_batch = cagrad_dual_solve(torch.stack(grams), c, max_iter=3000, tol=1e-12)  # also as one batch
    for i, gram in enumerate(grams):
        _, w_exact = cagrad_dual_exact(gram, c)
        _, w, converged = cagrad_dual_solve(gram, c, max_iter=3000, tol=1e-12)
        scale = float(gram.mean(-1).abs().max()) + c * float(gram.mean().clamp(min=0).sqrt())
        for got, ok in ((w, converged), (w_batch[i], converged_batch[i])):
            assert bool(ok), (c, i)
            assert _dual_objective(gram, got, c) - _dual_objective(gram, w_exact, c) <= 1e-9 * scale, (c, i)


def test_the_dropped_negatives_start_is_on_the_simplex_and_uniform_where_it_has_no_candidate():
    """The start the active-set steps and the gap check begin from: after dropping every negative
    weight, the stationary point on the rows left, or 1/K where that point does not exist (the dual
    is unbounded below on the support's hull, 1ᵀv ≤ 0: common for small c). Either way a point of
    the simplex. Conflicting rows in R⁵ (K = 3..12), c = 0.05, 0.2, 0.5: the 1/K fallback is
    taken on 45 of these 120 problems; bound 30."""
    from morl.aggregators.cagrad import _dropped_negatives_start, _dual_terms

    fallbacks = 0
    for seed in range(40):
        gen = torch.Generator().manual_seed(seed)
        k = 3 + seed % 10
        j = torch.randn(k, 5, generator=gen, dtype=torch.float64)
        if seed % 2:
            j = j - 0.8 * j.mean(0)
        gram = j @ j.T
        for c in (0.05, 0.2, 0.5):
            g, b, r, _ = _dual_terms(gram / gram.diagonal().max(), c)
            w = _dropped_negatives_start(g, b, r, k)
            assert float(w.min()) >= 0 and abs(float(w.sum()) - 1) <= 1e-12, (seed, c)
            fallbacks += torch.equal(w, torch.full_like(w, 1.0 / k))
    assert fallbacks >= 30, fallbacks
