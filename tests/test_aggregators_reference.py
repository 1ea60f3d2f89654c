"""MGDA and CAGrad against independent solvers (cvxpy with Clarabel, quadprog), K ∈ {2, 5, 20, 100}."""

import cvxpy as cp
import numpy as np
import pytest
import quadprog
import torch

from morl.aggregators import build


def _jacobian(seed, k, d, scale):
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, d, generator=gen, dtype=torch.float64) + 0.4 * torch.randn(1, d, generator=gen, dtype=torch.float64)
    return j * scale


def _cvxpy_mgda(j: np.ndarray) -> np.ndarray:
    s = np.abs(j).max()
    w = cp.Variable(j.shape[0])
    cp.Problem(cp.Minimize(cp.sum_squares((j / s).T @ w)), [w >= 0, cp.sum(w) == 1]).solve(solver="CLARABEL")
    return w.value @ j


def _quadprog_mgda(j: np.ndarray) -> np.ndarray:
    k = j.shape[0]
    g = (j / np.abs(j).max()) @ (j / np.abs(j).max()).T
    q = g / g.diagonal().max() + 1e-12 * np.eye(k)
    w = quadprog.solve_qp(q, np.zeros(k), np.hstack([np.ones((k, 1)), np.eye(k)]), np.r_[1.0, np.zeros(k)], meq=1)[0]
    return w @ j


def _cvxpy_cagrad(j: np.ndarray, c: float) -> np.ndarray:
    s = np.abs(j).max()
    jn = j / s
    g0 = jn.mean(0)
    r = c * np.linalg.norm(g0)
    w = cp.Variable(j.shape[0])
    cp.Problem(cp.Minimize((jn @ g0) @ w + r * cp.norm(jn.T @ w)), [w >= 0, cp.sum(w) == 1]).solve(solver="CLARABEL")
    gw = jn.T @ w.value
    return (g0 + r / np.linalg.norm(gw) * gw) * s


@pytest.mark.parametrize("k", [2, 5, 20, 100])
@pytest.mark.parametrize("scale", [1e-8, 1.0, 1e8])
def test_mgda_agrees_with_cvxpy_and_quadprog(k, scale):
    for seed in range(2):
        j = _jacobian(seed, k, 3 * k + 10, scale)
        d = build("mgda")(j).numpy()
        ref_cvx, ref_qp = _cvxpy_mgda(j.numpy()), _quadprog_mgda(j.numpy())
        unit = np.linalg.norm(j.numpy(), axis=1).max()
        assert np.linalg.norm(d - ref_qp) <= 1e-5 * unit
        assert np.linalg.norm(d - ref_cvx) <= 1e-4 * unit  # Clarabel's own accuracy is ~1e-8 in w


@pytest.mark.parametrize("k", [2, 5, 20, 100])
@pytest.mark.parametrize("c", [0.5, 0.9])
def test_cagrad_agrees_with_cvxpy(k, c):
    for seed, scale in ((0, 1.0), (1, 1e-6), (2, 1e6)):
        j = _jacobian(seed, k, 3 * k + 10, scale)
        d = build("cagrad", c=c, rescale=0)(j).numpy()
        ref = _cvxpy_cagrad(j.numpy(), c)
        assert np.linalg.norm(d - ref) <= 1e-4 * np.linalg.norm(ref)
        # rescale=1 (the reference code's default) only divides by 1 + c²
        d1 = build("cagrad", c=c)(j).numpy()
        np.testing.assert_allclose(d1, ref / (1 + c**2), rtol=1e-4, atol=1e-4 * np.abs(ref).max())
