"""GraB as the JoGBa paper states it (Algs. 3 and 4): per objective (``GraBSeparate``) and on the
aggregated direction (``GraBShared``)."""

import torch

from morl.ordering import GraBSeparate, GraBShared
from tests.ordering.static_gradients import gaussian_grads, make, run_static


def test_separate_equals_independent_single_objective_runs():
    G = gaussian_grads(3, 32, 4, seed=6)
    sep = run_static(make(GraBSeparate, G, seed=1, init_order="identity"), G, 4)
    for m in range(3):
        one = run_static(make(GraBSeparate, G[m : m + 1], seed=1, init_order="identity"), G[m : m + 1], 4)
        assert torch.equal(sep[m], one[0])


def test_grab_shared_keeps_one_order_and_depends_on_lambda():
    G = gaussian_grads(3, 48, 6, seed=7)
    a = run_static(make(GraBShared, G, seed=2), G, 4)
    assert all(torch.equal(a[0], a[m]) for m in range(3))
    b = run_static(make(GraBShared, G, seed=2), G, 4, lam=torch.tensor([0.8, 0.1, 0.1], dtype=G.dtype))
    assert not torch.equal(a, b)
