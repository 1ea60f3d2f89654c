"""ZDT-1/2/3 (Zitzler, Deb & Thiele 2000) against pymoo's implementations (a test-only reference)
at random points of the box, hand values on the Pareto set, and the true fronts' shapes."""

import numpy as np
import pytest
import torch
from pymoo.problems.multi.zdt import ZDT1, ZDT2, ZDT3

from morl.problems.zdt import DIM, EPS, pareto_front, project, zdt

PYMOO = {"zdt1": ZDT1, "zdt2": ZDT2, "zdt3": ZDT3}


@pytest.mark.parametrize("name", sorted(PYMOO))
def test_objectives_match_pymoo(name):
    x = torch.rand(200, DIM, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x[:, 0] = x[:, 0].clamp_min(EPS)  # below EPS the square root is taken at EPS on purpose
    np.testing.assert_allclose(zdt(name, x).numpy(), PYMOO[name](n_var=DIM).evaluate(x.numpy()), rtol=1e-12)


def test_hand_values_on_the_pareto_set():
    """x_1 = 1/4, the rest 0 (g = 1): f2 = 1 − 1/2, 1 − 1/16, 1 − 1/2 − (1/4)·sin(5π/2)."""
    x = torch.zeros(DIM, dtype=torch.float64)
    x[0] = 0.25
    for name, f2 in (("zdt1", 0.5), ("zdt2", 0.9375), ("zdt3", 0.25)):
        torch.testing.assert_close(zdt(name, x), torch.tensor([0.25, f2], dtype=torch.float64))


def test_the_fronts_are_the_g_equals_one_curves():
    f = pareto_front("zdt1", 11)
    torch.testing.assert_close(f[:, 1], 1 - f[:, 0].clamp_min(EPS).sqrt())
    f3 = pareto_front("zdt3", 1000)
    assert len(f3) < 1000  # the dominated pieces of the g = 1 curve are dropped
    dominated = (f3[None] <= f3[:, None]).all(-1) & (f3[None] < f3[:, None]).any(-1)
    assert not dominated.any()


def test_project_clamps_into_the_open_box_and_bad_input_is_one_line():
    assert torch.equal(project(torch.tensor([-1.0, 0.5, 2.0])), torch.tensor([EPS, 0.5, 1 - EPS]))
    with pytest.raises(ValueError, match="unknown ZDT problem 'zdt9'; allowed: zdt1, zdt2, zdt3"):
        zdt("zdt9", torch.zeros(DIM))
    with pytest.raises(ValueError, match=r"shape \[\.\.\., 30\]"):
        zdt("zdt1", torch.zeros(3))
