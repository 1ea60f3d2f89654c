"""morl.solvers.simplex_descent.minimize_on_simplex (accelerated projected gradient) against quadprog.

Problems: min ½xᵀGx + cᵀx on the simplex, G with eigenvalues from 1 to 1e-3 (κ = 1e3) in a
random basis, K = 40. quadprog's dual active-set method is exact and shares nothing with
the routine. The iteration budget is part of the claim: FISTA needs O(√κ) iterations where
plain projected gradient needs O(κ). Measured over seeds 0..5: the routine reports
convergence (FW gap ≤ 1e-10, or the objective stalled at rounding level) after at most 150
iterations; the budget here is 400.
"""

import numpy as np
import pytest
import quadprog
import torch

from morl.solvers.simplex_descent import fw_gap, minimize_on_simplex
from simplex_reference import proj_simplex_np

K = 40


def problem(seed: int):
    gen = torch.Generator().manual_seed(seed)
    u = torch.linalg.qr(torch.randn(K, K, generator=gen, dtype=torch.float64))[0]
    gram = (u * torch.logspace(0, -3, K, dtype=torch.float64)) @ u.T
    c = 0.01 * torch.randn(K, generator=gen, dtype=torch.float64)

    def fun(x):
        gx = (gram @ x.unsqueeze(-1)).squeeze(-1)
        return 0.5 * (x * gx).sum(-1) + (c * x).sum(-1), gx + c

    return fun, gram, c


def quadprog_simplex(gram: np.ndarray, c: np.ndarray) -> np.ndarray:
    constraints = np.hstack([np.ones((K, 1)), np.eye(K)])
    return quadprog.solve_qp(gram, -c, constraints, np.r_[1.0, np.zeros(K)], meq=1)[0]


@pytest.mark.parametrize("seed", range(3))
def test_converges_within_the_budget_to_the_qp_optimum(seed):
    fun, gram, c = problem(seed)
    x0 = torch.full((K,), 1.0 / K, dtype=torch.float64)
    x, done = minimize_on_simplex(fun, x0, 1.0 / gram.trace(), max_iter=400, tol=1e-10, return_converged=True)
    # Measured (seeds 0..5): f − f* ≤ 3.6e-16, |x − x*| ≤ 8.5e-8, FW gap ≤ 5.2e-9 (the entries
    # stop on the objective's stall at rounding level, before the gap reaches 1e-10).
    assert bool(done)
    assert float(fw_gap(x, fun(x)[1])) <= 1e-7
    ref = quadprog_simplex(gram.numpy(), c.numpy())
    f, f_ref = float(fun(x)[0]), float(fun(torch.from_numpy(ref))[0])
    assert abs(f - f_ref) <= 1e-13
    np.testing.assert_allclose(x.numpy(), np.clip(ref, 0, None), rtol=0, atol=1e-6)


def test_batched_entries_are_independent_and_report_their_own_convergence():
    # two problems in one batch with different budgets of need: the batched run equals the
    # separate runs, and an entry cut short by max_iter says so.
    funs = [problem(s) for s in (0, 4)]
    grams = torch.stack([f[1] for f in funs])
    cs = torch.stack([f[2] for f in funs])

    def fun(x):
        gx = (grams @ x.unsqueeze(-1)).squeeze(-1)
        return 0.5 * (x * gx).sum(-1) + (cs * x).sum(-1), gx + cs

    x0 = torch.full((2, K), 1.0 / K, dtype=torch.float64)
    step0 = 1.0 / grams.diagonal(dim1=-2, dim2=-1).sum(-1)
    x, done = minimize_on_simplex(fun, x0, step0, max_iter=400, tol=1e-10, return_converged=True)
    assert done.shape == (2,) and done.all()
    for b in range(2):
        ref = quadprog_simplex(grams[b].numpy(), cs[b].numpy())
        np.testing.assert_allclose(x[b].numpy(), np.clip(ref, 0, None), rtol=0, atol=1e-6)
    _, short = minimize_on_simplex(fun, x0, step0, max_iter=3, tol=1e-10, return_converged=True)
    assert not short.any()


# -- the iterates, step by step --------------------------------------------------------------
# The quadprog comparisons above check where the routine ends, which any descent method with
# the same fixed point passes. Here its iterates are compared with a plain transcription of
# the documented method: FISTA (Beck & Teboulle 2009, Sec. 4, t_{k+1} = (1 + sqrt(1 + 4t_k²))/2,
# y = x_k + ((t_k − 1)/t_{k+1})(x_k − x_{k−1})) with backtracking on the quadratic upper model
# f(y) + ∇f(y)·(z − y) + ‖z − y‖²/(2η) (halve η on rejection, grow it by GROW = 1.2 on
# acceptance), function-value restart (O'Donoghue & Candès 2015: an accepted step that raises
# f drops the momentum, t = 1, y = x), and the simplex projection of Duchi et al. (2008).
# Scalar numpy, one problem at a time; the tolerance and stall tests are switched off
# (tol < 0, iterations too few to stall twice) so every iteration is a step.


def fista_transcription(gram, c, x0, step0, iters):
    f = lambda x: 0.5 * x @ gram @ x + c @ x  # noqa: E731
    grad = lambda x: gram @ x + c  # noqa: E731
    x = proj_simplex_np(x0)
    y, t, eta = x.copy(), 1.0, step0
    events = {"rejected": 0, "rejected with momentum": 0, "restarted": 0, "momentum": 0}
    for _ in range(iters):
        z = proj_simplex_np(y - eta * grad(y))
        model = f(y) + grad(y) @ (z - y) + (z - y) @ (z - y) / (2 * eta)
        if f(z) > model + 1e-13 * abs(f(y)):
            eta, events["rejected"] = 0.5 * eta, events["rejected"] + 1
            events["rejected with momentum"] += t > 1  # y (not x) is kept for the next trial
            continue
        eta *= 1.2
        if f(z) <= f(x):
            t_next = 0.5 * (1 + np.sqrt(1 + 4 * t * t))
            y, x, t = z + (t - 1) / t_next * (z - x), z, t_next
            events["momentum"] += t > 1
        else:
            y, t, events["restarted"] = x.copy(), 1.0, events["restarted"] + 1
    return x, events


def hilbert_problem(k: int, shift: float):
    """min ½xᵀHx + cᵀx with H the k×k Hilbert matrix (κ ≈ 1.5e7 at k = 6) and
    c_i = shift·(−1)^i: no random draw, so the branches below are reached on every seeding."""
    i = np.arange(k)
    gram = 1.0 / (i[:, None] + i[None, :] + 1.0)
    return gram, shift * (-1.0) ** i


@pytest.mark.parametrize("iters", [1, 2, 7, 19, 40])
def test_iterates_are_fistas_with_backtracking_and_restart(iters):
    """A batch of four problems (different step sizes and starts), each against the
    transcription alone after ``iters`` iterations; the run rejects steps, restarts and uses
    momentum, so dropping or mis-signing any of them moves the iterate."""
    # (size, shift, first step, start): the first rejects its long first steps, the second
    # restarts (25 times in 40 iterations), the third accepts every step with momentum; the
    # fourth (the KMS matrix 0.9^|i−j|, interior optimum) rejects steps once momentum has built
    # up, where keeping y rather than restarting from x changes the 19th iterate by 4e-3
    i = np.arange(6)
    cases = [(*hilbert_problem(6, 0.05), 40.0, np.eye(6)[0]), (*hilbert_problem(4, -0.02), 40.0, np.full(4, 1 / 4)),
             (*hilbert_problem(5, 0.3), 0.7, np.eye(5)[4] + 0.1), (0.9 ** np.abs(i[:, None] - i), np.zeros(6), 0.7, np.eye(6)[0])]
    k = 6
    grams, cs, x0s, steps, refs = [], [], [], [], []
    seen = dict.fromkeys(("rejected", "rejected with momentum", "restarted", "momentum"), 0)
    for gram, c, step0, x0 in cases:
        n = len(c)
        ref, events = fista_transcription(gram, c, x0, step0, iters)
        seen = {key: seen[key] + events[key] for key in seen}
        pad = k - n  # a smaller problem inside K = 6: the extra variables' cost is huge
        grams.append(np.pad(gram, (0, pad)) + np.diag([0.0] * n + [1.0] * pad))
        cs.append(np.r_[c, [1e3] * pad])
        x0s.append(np.r_[x0, [0.0] * pad])
        steps.append(step0)
        refs.append(np.r_[ref, [0.0] * pad])
    gram, c = torch.tensor(np.array(grams)), torch.tensor(np.array(cs))

    def fun(x):
        gx = (gram @ x.unsqueeze(-1)).squeeze(-1)
        return 0.5 * (x * gx).sum(-1) + (c * x).sum(-1), gx + c

    x = minimize_on_simplex(fun, torch.tensor(np.array(x0s)), torch.tensor(steps, dtype=torch.float64), max_iter=iters, tol=-1.0)
    np.testing.assert_allclose(x.numpy(), np.array(refs), rtol=0, atol=1e-12)
    if iters == 40:
        assert min(seen.values()) > 0, seen
