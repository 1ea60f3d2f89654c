"""CAGrad edges the mutation run of `morl/aggregators/cagrad.py` (docs/testing.md) found unpinned:
the documented defaults, a direct `weights_from_gramian` call (dtype kept, any scale), the
options reaching the iterative solver, and that solver's default tolerance against cvxpy."""

import cvxpy as cp
import numpy as np
import pytest
import torch

import morl
import morl.aggregators.cagrad as cagrad_module
from morl.aggregators.cagrad import cagrad_dual_solve, cagrad_dual_weights


def _gram(k: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, 3 * k, generator=gen, dtype=torch.float64) + 0.5 * torch.randn(1, 3 * k, generator=gen, dtype=torch.float64)
    return (j @ j.T).to(dtype)


def test_documented_defaults():
    agg = morl.build("cagrad")
    assert (agg.c, agg.rescale, agg.max_iter, agg.tol, agg.warm_start) == (0.5, 1, 100, 1e-10, False)


@pytest.mark.parametrize("k", [3, 8, 12])
def test_direct_call_keeps_the_dtype_and_is_scale_free(k):
    """A float32 Gramian of gradients at the contract's 1e12 (G ~ 1e24) gives the weights of
    the same Gramian at scale 1, in float32 (the weights are homogeneous of degree 0 in G)."""
    gram = _gram(k, seed=k, dtype=torch.float32)
    w1 = morl.build("cagrad").weights_from_gramian(gram)
    w_big = morl.build("cagrad").weights_from_gramian(gram * 1e24)
    assert w1.dtype == w_big.dtype == torch.float32
    assert torch.isfinite(w_big).all()
    torch.testing.assert_close(w_big, w1, rtol=1e-4, atol=1e-6)


def test_options_reach_the_iterative_solver(monkeypatch):
    """K > 10, and any K once warm-started, goes through cagrad_dual_solve with the user's c,
    max_iter and tol."""
    seen = {}
    real = cagrad_module.cagrad_dual_solve

    def spy(gram, c, max_iter, tol, init=None):
        seen.update(c=c, max_iter=max_iter, tol=tol)
        return real(gram, c, max_iter, tol, init=init)

    monkeypatch.setattr(cagrad_module, "cagrad_dual_solve", spy)
    morl.build("cagrad", c=0.7, max_iter=37, tol=1e-6).weights_from_gramian(_gram(12, seed=0))
    assert seen == {"c": 0.7, "max_iter": 37, "tol": 1e-6}
    seen.clear()
    warm = morl.build("cagrad", c=0.3, max_iter=11, tol=1e-5, warm_start=True)
    warm.weights_from_gramian(_gram(4, seed=1))  # no previous solution yet: K ≤ 6 enumerates
    assert seen == {}
    warm.weights_from_gramian(_gram(4, seed=2))
    assert seen == {"c": 0.3, "max_iter": 11, "tol": 1e-5}


@pytest.mark.parametrize("seed", range(3))
def test_iterative_dual_with_its_defaults_matches_cvxpy(seed):
    """`cagrad_dual_weights(gram, c)` at K = 12 (above the exact K ≤ 10 path), defaults only,
    against cvxpy's optimum of the same dual: within 1e-7 of its objective (measured ≤ 1.0e-9
    for seeds 0-9; cvxpy's own accuracy is ~1e-8)."""
    gram = _gram(12, seed=seed)
    gram = gram / gram.diagonal().max()
    c = 0.5
    _, w = cagrad_dual_weights(gram, c)
    g = gram.numpy()
    b = g.mean(1)
    r = c * np.sqrt(max(b.mean(), 0.0))
    x = cp.Variable(12)
    chol = np.linalg.cholesky(g + 1e-12 * np.eye(12))
    problem = cp.Problem(cp.Minimize(x @ b + r * cp.norm(chol.T @ x)), [x >= 0, cp.sum(x) == 1])
    problem.solve()
    wn = w.numpy()
    ours = float(wn @ b + r * np.sqrt(max(wn @ g @ wn, 0.0)))
    assert abs(ours - problem.value) <= 1e-7
    # and the solve says so: these well-conditioned Gramians converge (seeds 0-19 all do)
    assert bool(cagrad_dual_solve(gram, c)[2])
