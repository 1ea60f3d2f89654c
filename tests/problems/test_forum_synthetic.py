"""FORUM's synthetic bi-level problems (morl/problems/forum_synthetic.py) by hand: Eq. 24's
objectives, distance to its optimal segment and KKT residual; the quadratic's closed-form solution
against the optimality conditions; the hull distance by hand."""

import torch

from morl.problems.forum_synthetic import BilevelQuadratic, Eq24Problem, ParetoQuadratic


def _t(*values):
    return torch.tensor(values, dtype=torch.float64)


def test_eq24_objectives_by_hand():
    p = Eq24Problem()
    alpha, omega = _t(1.5), _t(0.0, 3.0)
    torch.testing.assert_close(p.upper(alpha, omega), _t(1 + 2.25, 4 + 2.25))
    torch.testing.assert_close(p.lower(alpha, omega), torch.tensor(2.25 + 2.25, dtype=torch.float64))
    torch.testing.assert_close(p.q(alpha, omega), p.lower(alpha, omega))


def test_eq24_distance_is_zero_on_the_optimal_segment_and_euclidean_off_it():
    p = Eq24Problem()
    assert p.distance(_t(1.5), _t(1.5, 1.5)).item() == 0.0
    # (3, 3, 3) projects onto the segment's end (2, 2, 2): distance √3
    torch.testing.assert_close(p.distance(_t(3.0), _t(3.0, 3.0)), torch.tensor(3.0, dtype=torch.float64).sqrt())


def test_eq24_kkt_residual_vanishes_at_a_solution_with_its_multipliers():
    """At α = ω_1 = ω_2 = 1.5, ∇F_1 = (0, 1, 0) and ∇F_2 = (0, −1, 0) in (α, ω_1, ω_2): λ = (½, ½)
    with ν = 0 gives residual 0, λ = (1, 0) gives 1."""
    p = Eq24Problem()
    zero = p.kkt(_t(1.5), _t(1.5, 1.5), _t(0.5, 0.5), torch.tensor(0.0, dtype=torch.float64))
    off = p.kkt(_t(1.5), _t(1.5, 1.5), _t(1.0, 0.0), torch.tensor(0.0, dtype=torch.float64))
    assert zero.item() <= 1e-24
    torch.testing.assert_close(off, torch.tensor(1.0, dtype=torch.float64))


def test_bilevel_quadratic_solution_is_stationary_for_the_reduced_problem():
    """ω*(α) = Aα; the reduced F(α) = ½‖Aα − b‖² + ½‖α‖² has gradient Aᵀ(Aα − b) + α = 0 at α*."""
    problem = BilevelQuadratic.random(3, 5, torch.Generator().manual_seed(0))
    alpha, omega = problem.solution()
    torch.testing.assert_close(omega, problem.A @ alpha)
    grad = problem.A.T @ (problem.A @ alpha - problem.b) + alpha
    torch.testing.assert_close(grad, torch.zeros(3, dtype=torch.float64), atol=1e-12, rtol=0)
    assert problem.lower(alpha, omega).item() == 0.0


def test_pareto_quadratic_hull_distance_by_hand():
    """Anchors (0, 0), (2, 0), (0, 2): a point inside is at 0, (2, 2) is √2 from the edge x + y = 2."""
    problem = ParetoQuadratic(_t(0.0, 0.0, 2.0, 0.0, 0.0, 2.0).view(3, 2))
    assert problem.m == 3
    assert problem.hull_distance(_t(0.5, 0.5)).item() <= 1e-12
    torch.testing.assert_close(problem.hull_distance(_t(2.0, 2.0)), torch.tensor(2.0, dtype=torch.float64).sqrt())
    torch.testing.assert_close(problem.upper(_t(0.0, 0.0), _t(1.0, 1.0)), _t(1.0, 1.0, 1.0))
