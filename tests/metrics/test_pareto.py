"""Pareto filter, hypervolume, EUM, MUL, sparsity and the equally spaced preferences, against hand
values and pymoo (the library MORL-Baselines computes its hypervolume and preference sets with)."""

import numpy as np
import pytest
import torch
from pymoo.indicators.hv import HV
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting
from pymoo.util.ref_dirs import get_reference_directions

from morl.metrics import most_metrics
from morl.metrics.pareto import (
    equally_spaced_weights,
    expected_utility,
    hypervolume,
    maximum_utility_loss,
    pareto_filter,
    pareto_mask,
    sparsity,
)


def random_front(rng, n, m):
    """Points on and under the positive unit sphere: a front with dominated points mixed in."""
    x = np.abs(rng.normal(size=(n, m)))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x * rng.uniform(0.6, 1.0, size=(n, 1)) * 100.0 - 50.0


def test_hypervolume_2d_and_3d_by_hand():
    staircase = [[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]]  # maximised: boxes of 1x3, 1x2 (new), 1x1 (new)
    assert float(hypervolume(staircase, [0.0, 0.0])) == pytest.approx(3 + 2 + 1)
    assert float(hypervolume(staircase, [1.0, 1.0])) == pytest.approx(1.0)  # only (2, 2) lies strictly beyond
    assert float(hypervolume(staircase, [0.5, 0.0])) == pytest.approx(0.5 * 3 + 1 * 2 + 1 * 1)
    assert float(hypervolume([[2.0, 1.0, 1.0], [1.0, 2.0, 1.0]], [0.0, 0.0, 0.0])) == pytest.approx(2 + 2 - 1)
    assert float(hypervolume([[1.0, 1.0, 1.0]], [-1.0, -2.0, -3.0])) == pytest.approx(2 * 3 * 4)
    # minimisation is the mirror image: the same boxes below the reference point
    assert float(hypervolume(-torch.tensor(staircase), [0.0, 0.0], maximize=False)) == pytest.approx(6.0)


def test_hypervolume_ignores_points_not_beyond_the_reference_and_empty_sets():
    assert float(hypervolume([[5.0, -1.0], [-1.0, 5.0]], [0.0, 0.0])) == 0.0
    assert float(hypervolume([[5.0, 0.0], [1.0, 1.0]], [0.0, 0.0])) == pytest.approx(1.0)  # on the boundary: 0
    assert float(hypervolume(torch.zeros(0, 3), [0.0, 0.0, 0.0])) == 0.0
    dominated_added = [[1.0, 3.0], [2.0, 2.0], [3.0, 1.0], [1.5, 1.5], [2.0, 2.0]]
    assert float(hypervolume(dominated_added, [0.0, 0.0])) == pytest.approx(6.0)


@pytest.mark.parametrize("m", [2, 3, 4])
def test_hypervolume_equals_pymoos_as_morl_baselines_calls_it(m):
    # MORL-Baselines: HV(ref_point=ref * -1)(points * -1), pymoo minimising
    rng = np.random.default_rng(m)
    ref = np.full(m, -60.0)
    for n in (1, 7, 40):
        pts = random_front(rng, n, m)
        expected = HV(ref_point=ref * -1)(pts * -1)
        assert float(hypervolume(pts, ref)) == pytest.approx(expected, rel=1e-12)


def test_most_metrics_hypervolume_is_the_same_minimising_one():
    rng = np.random.default_rng(0)
    pts = random_front(rng, 30, 3)
    ref = np.full(3, -60.0)
    assert float(most_metrics.hypervolume(torch.tensor(-pts), -ref)) == float(hypervolume(pts, ref))


def test_pareto_filter_keeps_exactly_the_first_front():
    rng = np.random.default_rng(1)
    for m in (2, 3):
        pts = np.round(random_front(rng, 60, m), 0)  # rounding makes ties and duplicates
        first = NonDominatedSorting().do(-pts, only_non_dominated_front=True)  # pymoo minimises
        mask = pareto_mask(pts, remove_duplicates=False).numpy()
        assert sorted(np.flatnonzero(mask)) == sorted(first)
    pts = [[1.0, 2.0], [2.0, 1.0], [1.0, 2.0], [0.5, 0.5], [2.0, 1.0]]
    assert pareto_mask(pts).tolist() == [True, True, False, False, False]  # duplicates: the first stays
    assert pareto_filter(pts).tolist() == [[1.0, 2.0], [2.0, 1.0]]
    assert pareto_mask([[1.0, 2.0], [0.5, 0.5]], maximize=False).tolist() == [False, True]


def test_expected_utility_and_maximum_utility_loss_by_hand():
    weights = [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]
    corners = [[1.0, 0.0], [0.0, 1.0]]
    # best utilities 1, 1, 0.5
    assert float(expected_utility(corners, weights)) == pytest.approx(2.5 / 3)
    assert float(expected_utility([[1.0, 0.0], [0.0, 1.0], [0.8, 0.8]], weights)) == pytest.approx(2.8 / 3)
    # losses against the corners: (1, 1, 0.5) - (0.5, 0.5, 0.5) and (1, 1, 0.5) - (1, 0, 0.5)
    assert float(maximum_utility_loss([[0.5, 0.5]], corners, weights)) == pytest.approx(0.5)
    assert float(maximum_utility_loss([[1.0, 0.0]], corners, weights)) == pytest.approx(1.0)
    assert float(maximum_utility_loss(corners, corners, weights)) == 0.0


def test_sparsity_by_hand():
    # objective 1 sorted 0, 1, 3 and objective 2 sorted 0, 1, 3: gaps 1 and 2 each, (1 + 4) * 2 / (3 - 1)
    assert float(sparsity([[0.0, 3.0], [1.0, 1.0], [3.0, 0.0]])) == pytest.approx(5.0)
    assert float(sparsity([[1.0, 2.0]])) == 0.0
    assert float(sparsity([[0.0, 2.0], [2.0, 0.0]])) == pytest.approx(8.0)


def test_equally_spaced_weights_are_pymoos_energy_directions():
    expected = get_reference_directions("energy", 3, 50, seed=42)  # MORL-Baselines' equally_spaced_weights(3, 50)
    w = equally_spaced_weights(3, 50)
    assert w.shape == (50, 3) and w.dtype == torch.float64
    np.testing.assert_array_equal(w.numpy(), expected)


@pytest.mark.integration  # pymoo optimises each set for up to 6 s
@pytest.mark.parametrize("m, n", [(2, 10), (2, 20), (2, 50), (2, 100), (3, 10), (3, 20), (3, 100)])
def test_every_shipped_weight_set_is_pymoos(m, n):
    np.testing.assert_array_equal(equally_spaced_weights(m, n).numpy(), get_reference_directions("energy", m, n))


def test_weights_lie_on_the_simplex_with_its_corners():
    w = equally_spaced_weights(3)
    assert (w >= 0).all() and torch.allclose(w.sum(1), torch.ones(50, dtype=torch.float64), atol=1e-12)
    for corner in torch.eye(3, dtype=torch.float64):
        assert (w == corner).all(1).any()


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match=r"ref_point must have 2 coordinates"):
        hypervolume([[1.0, 2.0]], [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"points must have shape \[n, M\]"):
        hypervolume([1.0, 2.0], [0.0, 0.0])
    with pytest.raises(ValueError, match=r"weights have 3 objectives, the front has 2"):
        expected_utility([[1.0, 2.0]], [[1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"the front is empty"):
        expected_utility(torch.zeros(0, 2), [[1.0, 0.0]])
    with pytest.raises(ValueError, match=r"no equally spaced weight set for m=4, n=50; available: \(m=2, n=10\)"):
        equally_spaced_weights(4)
