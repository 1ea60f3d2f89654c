"""Optimal transport: marginals, sparsity, agreement with POT's exact solver, the regulariser."""

import numpy as np
import ot
import pytest
import torch

from morl import transport as T
from morl.metrics.most_metrics import column_cosine


def _problem(gen, n=30, m=5, scale=2.3):
    cost = torch.rand(n, m, generator=gen, dtype=torch.float64) * scale
    a = torch.full((n,), m / n, dtype=torch.float64)  # the code's scale: total mass m
    b = torch.ones(m, dtype=torch.float64)
    return cost, a, b


@pytest.mark.parametrize(
    "seed", [0, pytest.param(1, marks=pytest.mark.integration), pytest.param(2, marks=pytest.mark.integration)]
)
def test_ipot_matches_exact_emd(seed):
    cost, a, b = _problem(torch.Generator().manual_seed(seed))
    res = T.solve(cost, a, b, max_iter=1000)
    exact = ot.emd(a.numpy(), b.numpy(), cost.numpy())
    ref = float((exact * cost.numpy()).sum())
    assert float(res.objective) == pytest.approx(ref, rel=1e-4)  # IPOT converges to the exact (unregularised) plan
    assert float(res.marginal_error) < 1e-12
    assert bool((res.plan >= 0).all())


def test_plan_is_sparse_vertex(gen):
    cost, a, b = _problem(gen)
    plan = T.solve(cost, a, b, max_iter=1000).plan
    nnz = int((plan > 1e-6 * a.sum()).sum())
    assert nnz <= 30 + 5 - 1  # Proposition 1: a vertex of Ω has at most n + m − 1 nonzeros


def test_sinkhorn_marginals_and_entropic_reference(gen):
    cost, a, b = _problem(gen)
    plan, _, _ = T.sinkhorn(cost, a / 5, b / 5, eps=0.05, tol=1e-10, max_iter=5000)
    ref = ot.sinkhorn(
        a.numpy() / 5, b.numpy() / 5, cost.numpy(), 0.05, method="sinkhorn_log", stopThr=1e-12, numItermax=20000
    )
    np.testing.assert_allclose(plan.numpy(), ref, atol=1e-7)
    assert float(T.marginal_error(plan, a / 5, b / 5)) < 1e-9


def test_raw_losses_do_not_lose_mass(gen):
    # POT's plain Sinkhorn silently returns ~0 mass on costs like these; ours stays feasible.
    cost, a, b = _problem(gen, scale=2.3)
    res = T.solve(cost, a, b, method="sinkhorn", eps=1e-2, max_iter=200)
    assert float(res.plan.sum()) == pytest.approx(5.0, rel=1e-9)


def test_planted_partition_is_recovered_exactly():
    n, m = 30, 5
    cost = torch.ones(n, m, dtype=torch.float64)
    owner = torch.arange(n) % m
    cost[torch.arange(n), owner] = 0.0
    res = T.solve(cost)
    expected = torch.zeros(n, m, dtype=torch.float64)
    expected[torch.arange(n), owner] = 1.0 / n
    torch.testing.assert_close(res.plan, expected, atol=1e-9, rtol=0)
    assert float(res.objective) == pytest.approx(0.0, abs=1e-9)
    assert float(column_cosine(res.plan)) == pytest.approx(0.0, abs=1e-6)


def test_regulariser_gives_one_model_per_objective(gen):
    cost, a, b = _problem(gen)
    base = T.solve(cost / 5, None, None)
    reg = T.solve(cost / 5, None, None, tau=10.0)
    # τ > 0 never lowers Σ_i max_j Γ_ij, and a large τ makes rows a single 1/n entry. The
    # majorisation-minimisation is a local method: over seeds 0-19 (MORL_TEST_SEED) it made all
    # 30 rows single on 13 seeds and left 7 or 14 rows split (6/7 : 1/7 of the row's mass) on
    # the others, whose objective is a local optimum (seed 0 alone made every seed look global).
    assert float(-T.diversity_regulariser(reg.plan)) >= float(-T.diversity_regulariser(base.plan)) - 1e-9
    single = (reg.plan > 1e-6 / 30).sum(1) == 1
    assert int(single.sum()) >= 15
    torch.testing.assert_close(reg.plan.sum(0), torch.full((5,), 0.2, dtype=torch.float64))
    assert bool(((reg.plan[single].amax(1) - 1 / 30).abs() < 1e-9).all())


def test_mm_objective_never_increases(gen):
    """The returned (rounded) plan's objective. Seed 4 (MORL_TEST_SEED) ended 0.51 above the
    unregularised plan's while MM compared unrounded IPOT plans; with each candidate rounded onto
    Ω before the comparison, none of seeds 0-19 ends above it."""
    cost, _, _ = _problem(gen, n=12, m=3)
    a = torch.rand(12, generator=gen, dtype=torch.float64) + 0.1
    b = torch.rand(3, generator=gen, dtype=torch.float64) + 0.1
    b = b * a.sum() / b.sum()
    r0 = T.solve(cost, a, b)
    r1 = T.solve(cost, a, b, tau=0.3)
    obj0 = (cost * r0.plan).sum() + 0.3 * T.diversity_regulariser(r0.plan)
    assert float(r1.objective) <= float(obj0) + 1e-9


def test_rounding_is_feasible(gen):
    cost, a, b = _problem(gen)
    rough = torch.rand(30, 5, generator=gen, dtype=torch.float64)
    fixed = T.round_to_marginals(rough, a, b)
    assert float(T.marginal_error(fixed, a, b)) < 1e-12


def test_a_batch_of_sinkhorn_problems_is_solved_as_each_alone(gen):
    cost = torch.rand(4, 10, 3, generator=gen, dtype=torch.float64)
    a = torch.full((4, 10), 0.1, dtype=torch.float64)
    b = torch.full((4, 3), 1 / 3, dtype=torch.float64)
    plan, _, _ = T.sinkhorn(cost, a, b, eps=0.1, tol=1e-10)
    for k in range(4):
        single, _, _ = T.sinkhorn(cost[k], a[k], b[k], eps=0.1, tol=1e-10)
        torch.testing.assert_close(plan[k], single, atol=1e-8, rtol=0)


def test_violations_and_bad_input_are_loud(gen):
    cost, a, b = _problem(gen)
    with pytest.raises(T.TransportError, match="marginals"):
        T.check_marginals(torch.zeros(30, 5, dtype=torch.float64), a, b)
    with pytest.warns(RuntimeWarning):
        T.check_marginals(torch.zeros(30, 5, dtype=torch.float64), a, b, on_violation="warn")
    with pytest.raises(ValueError, match="equal positive total mass"):
        T.solve(cost, a, b * 2)
    bad = cost.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        T.solve(bad, a, b)
    with pytest.raises(ValueError, match="allowed: ipot, sinkhorn"):
        T.solve(cost, a, b, method="emd")
    with pytest.raises(ValueError, match="tau"):
        T.solve(cost, a, b, tau=-1.0)
