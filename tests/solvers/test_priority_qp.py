"""PCD's dual QP, min_{μ ≥ 0} ½μᵀAμ − bᵀμ with A = G_SS, b = τ∘diag(A) − G_S1 (the KKT form
of arXiv 2606.29521's projection), solved by the masked dual active-set method: against
quadprog on the same QP, and its infeasible, dependent and unfinished cases."""

from __future__ import annotations

import numpy as np
import pytest
import quadprog
import torch

from morl.solvers.priority_qp import dual_terms, solve_masked


def _rows(seed: int, k: int, d: int = 64) -> torch.Tensor:
    """Unit-norm rows, the secondaries pushed against the primary (row 0) on odd seeds."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(k, d, generator=gen, dtype=torch.float64)
    if seed % 2:
        rows[1:] -= 0.8 * rows[0]
    return rows / rows.norm(dim=1, keepdim=True)


@pytest.mark.parametrize("k", [3, 8, 20])
@pytest.mark.parametrize("tau", [0.02, 0.3])
def test_multipliers_match_quadprog_on_the_dual(k, tau):
    """Full-rank A (D = 64 > K): quadprog's μ to 1e-9 (measured ~1e-13); the slacks Aμ − b are
    ≥ 0 and vanish where μ > 0."""
    for seed in range(6):
        rows = _rows(seed, k)
        a, b = dual_terms(rows @ rows.T, torch.full((k - 1,), tau, dtype=torch.float64))
        mu, feasible, converged = solve_masked(a, b, 1e-9, 3 * k + 10)
        ref = quadprog.solve_qp(a.numpy(), b.numpy(), np.eye(k - 1), np.zeros(k - 1))[0]
        assert bool(feasible) and bool(converged)
        assert np.abs(mu.numpy() - ref).max() <= 1e-9 * max(1.0, np.abs(ref).max()), seed
        slack = a @ mu - b
        assert slack.min() >= -1e-12 and (mu * slack).abs().max() <= 1e-12


def test_infeasible_constraints_give_zero_multipliers_and_say_so():
    # two opposite secondary gradients, τ > 0: no d gains on both (the dual is unbounded)
    rows = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, -1.0, 0.0]], dtype=torch.float64)
    a, b = dual_terms(rows @ rows.T, torch.full((2,), 0.1, dtype=torch.float64))
    mu, feasible, converged = solve_masked(a, b, 1e-9, 20)
    assert torch.equal(mu, torch.zeros(2, dtype=torch.float64)) and not bool(feasible) and bool(converged)


def test_dependent_gradients_still_meet_every_constraint():
    # two copies of one violated secondary gradient: A is singular; one copy carries it
    rows = torch.tensor([[1.0, 0.0, 0.0], [-1.0, 1.0, 0.0], [-1.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    a, b = dual_terms(rows @ rows.T, torch.full((3,), 0.1, dtype=torch.float64))
    mu, feasible, converged = solve_masked(a, b, 1e-9, 20)
    assert bool(feasible) and bool(converged) and bool((mu >= 0).all())
    d = rows[0] + mu @ rows[1:]
    assert (rows[1:] @ d - 0.1 * rows[1:].square().sum(1)).min() > -1e-12


def test_steps_that_run_out_say_so():
    """K − 1 = 5 violated, mutually orthogonal constraints need 5 steps: 4 leave it unfinished
    with μ ≥ 0 (the last dual-feasible iterate), 5 finish it."""
    rows = torch.eye(6, dtype=torch.float64)
    rows[1:, 0] = -1.0
    a, b = dual_terms(rows @ rows.T, torch.full((5,), 0.02, dtype=torch.float64))
    mu, feasible, converged = solve_masked(a, b, 1e-9, 4)
    assert bool(feasible) and not bool(converged) and bool((mu >= 0).all())
    assert bool(solve_masked(a, b, 1e-9, 5)[2])
