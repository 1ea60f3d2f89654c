"""The EPO-AL paper's anchor problems (morl/problems/epo_toys.py): values and Jacobians against
autograd and hand values, Fig. 1's constants against their defining equation, and the planted
instances' exact Pareto point (fair, and stationary for the weighted min-max)."""

import math

import pytest
import torch

from morl.problems import epo_toys as toys


@pytest.mark.parametrize("kind", toys.KINDS)
def test_the_jacobian_is_the_gradient_of_the_values(kind):
    problem, _, w0 = toys.random_instance(4, 5, kind, torch.Generator().manual_seed(0))
    w = (w0 + 0.3).requires_grad_(True)
    auto = torch.autograd.functional.jacobian(problem.values, w)
    torch.testing.assert_close(problem.jacobian(w.detach()), auto, rtol=1e-12, atol=1e-14)


def test_values_by_hand():
    """Anchors e_1 and −e_1, w = 0: ‖w − w_k‖² = 1, so J = √2 − 1 (convex), 1 − 1/e (non-convex)."""
    anchors = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    w = torch.zeros(2, dtype=torch.float64)
    for kind, value in (("convex", math.sqrt(2) - 1), ("nonconvex", 1 - math.exp(-1))):
        expected = torch.full((2,), value, dtype=torch.float64)
        torch.testing.assert_close(toys.AnchorProblem(anchors, kind).values(w), expected)


def test_fig1_solution_solves_its_equation():
    """w* = t·1_3/√3 (each coordinate t/√3) with 0.2(1 − e^{−(t−1)²}) = 0.8(1 − e^{−(t+1)²}),
    both equal to the min-max value."""
    problem, r = toys.fig1_toy()
    w = torch.full((3,), toys.FIG1_SOLUTION_COORD, dtype=torch.float64)
    weighted = r * problem.values(w)
    torch.testing.assert_close(
        weighted, torch.full((2,), toys.FIG1_MINMAX_VALUE, dtype=torch.float64), atol=2e-6, rtol=0
    )


@pytest.mark.parametrize("kind", toys.KINDS)
def test_a_planted_point_is_fair_and_pareto_stationary(kind):
    """r_k J_k(w*) = t* for all k, and a non-negative combination of the gradients vanishes at
    w* = Σ α_k w_k (Pareto stationary): ∇J_k = s_k (w* − w_k), so weights α_k / s_k cancel them."""
    problem, r, _, w_star, t_star = toys.planted_instance(3, 6, kind, torch.Generator().manual_seed(1))
    torch.testing.assert_close(r * problem.values(w_star), t_star.expand(3), rtol=1e-12, atol=0)
    torch.testing.assert_close(r.sum(), torch.tensor(1.0, dtype=torch.float64))
    jac = problem.jacobian(w_star)
    scale = jac.norm(dim=1) / (w_star - problem.anchors).norm(dim=1)  # s_k > 0
    alpha = torch.linalg.lstsq(problem.anchors.T, w_star[:, None]).solution[:, 0]  # d = 6 > K: exact
    assert (alpha > 0).all() and abs(alpha.sum().item() - 1) < 1e-12
    weights = alpha / scale
    torch.testing.assert_close(weights @ jac, torch.zeros(6, dtype=torch.float64), rtol=0, atol=1e-12)


def test_a_bad_kind_or_anchor_shape_is_one_line():
    with pytest.raises(ValueError, match="kind='cubic' is not valid; allowed: convex, nonconvex"):
        toys.AnchorProblem(torch.zeros(2, 3), "cubic")
    with pytest.raises(ValueError, match=r"anchors must be \[K, d\]"):
        toys.AnchorProblem(torch.zeros(3))
