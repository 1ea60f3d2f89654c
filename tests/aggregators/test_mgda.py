"""MGDA (Désidéri 2012) against its definition: the min-norm point of the rows' convex hull,
checked by the KKT conditions (Lemma 6 of arXiv 2210.12624: g_k·d ≥ ‖d‖²), hand-computed
matrices, cvxpy (Clarabel) and quadprog, K up to 100 and gradients from 1e-8 to 1e8."""

import cvxpy as cp
import numpy as np
import pytest
import quadprog
import torch
from jacobians import cases, jacobians

import morl
from morl.aggregators import build
from morl.solvers import min_norm_gap
from morl.solvers.min_norm import min_norm_solve

DTYPES = (torch.float32, torch.float64)
REL_TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
# float32-exact entries whose float32 sum g11 + g22 = 2^25 + 2 rounds to 2^25 (spacing 4 there):
# the denominator is 6 exactly (λ₁ = 2/6 = 1/3) but 4 in float32 arithmetic (λ₁ = 1/2).
_G11, _G22, _G12 = 2.0**24 + 2, 2.0**24, 2.0**24 - 2


# -- MGDA ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mgda", "smg"])
def test_mgda_common_descent_and_kkt(name, gen):
    for j in jacobians(gen, n=25):
        agg = build(name)
        d = agg(j)
        # Lemma 6 at the vertices: g_k·d ≥ ‖d‖² (relative to the scale of the gradients)
        unit = j.norm(dim=1).max() ** 2
        assert ((j @ d - d @ d) >= -1e-6 * unit).all()
        w = agg.weights
        assert (w >= 0).all() and abs(w.sum().item() - 1) < 1e-9
        assert min_norm_gap(j @ j.T, w).item() < 1e-6


def test_mgda_scale_invariant_weights_linear_direction(gen):
    for j in jacobians(gen, n=10):
        agg = build("mgda")
        d1 = agg(j)
        w1 = agg.weights
        d2 = agg(j * 1e7)
        if torch.linalg.matrix_rank(j) == j.shape[0]:  # λ* is unique only for independent rows
            torch.testing.assert_close(agg.weights, w1, atol=1e-7, rtol=0)
        torch.testing.assert_close(d2, 1e7 * d1, rtol=1e-6, atol=1e-6 * (1e7 * j).abs().max().item())


@pytest.mark.parametrize("dtype", DTYPES)
def test_mgda_lemma_holds_relative_to_each_row(dtype, gen):
    """g_k·d ≥ ‖d‖² for every k, up to rounding relative to ‖g_k‖‖d‖: holds also when row
    norms differ by 1e6 (absolute tolerances in units of the largest row used to break it)."""
    for label, j in cases(gen, dtype):
        d = build("mgda")(j).double()
        jj = j.double()
        excess = (jj @ d - d @ d) / (jj.norm(dim=1) * jj.norm(dim=1).max()).clamp_min(1e-300)
        assert excess.min().item() >= -REL_TOL[dtype], label


# -- expected values on fixed matrices (computed by hand) ------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_mgda_fixed_matrices(dtype):
    t = lambda rows: torch.tensor(rows, dtype=dtype)  # noqa: E731
    # segment (2,0)-(0,1): the foot of the perpendicular from 0 is 0.2·(2,0) + 0.8·(0,1)
    torch.testing.assert_close(build("mgda")(t([[2.0, 0.0], [0.0, 1.0]])), t([0.4, 0.8]))
    # three orthonormal rows: the centroid (1/3)(1,1,1)
    torch.testing.assert_close(build("mgda")(t([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]])), t([1 / 3, 1 / 3, 1 / 3]))
    # 0 = (g1 + g2 + g3)/3 is in the hull: Pareto stationary, d = 0
    torch.testing.assert_close(
        build("mgda")(t([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])), t([0.0, 0.0]), atol=1e-6, rtol=0
    )
    # a row inside the hull of the others changes nothing: (1,1) is on the segment (2,0)-(0,2)
    torch.testing.assert_close(build("mgda")(t([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0], [3.0, 3.0]])), t([1.0, 1.0]))


def _jacobian(seed, k, d, scale):
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, d, generator=gen, dtype=torch.float64) + 0.4 * torch.randn(
        1, d, generator=gen, dtype=torch.float64
    )
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


_GRAM32 = torch.tensor([[_G11, _G12], [_G12, _G22]], dtype=torch.float32)


_LAMBDA = torch.tensor([1.0 / 3.0, 2.0 / 3.0], dtype=torch.float64)  # hand value: (g22 − g12) = 2 over 6


def test_two_task_closed_form_is_solved_in_float64_and_returned_in_the_gramian_dtype():
    w = morl.build("mgda").weights_from_gramian(_GRAM32)
    assert w.dtype == torch.float32
    # float32 arithmetic would give [0.5, 0.5]: a margin of 0.17 against a tolerance of 1e-6
    torch.testing.assert_close(w, _LAMBDA.to(torch.float32), rtol=0.0, atol=1e-6)


def test_two_task_weights_are_the_warm_start_state():
    mgda = morl.build("mgda", warm_start=True)
    w = mgda.weights_from_gramian(_GRAM32.to(torch.float64))
    torch.testing.assert_close(w, _LAMBDA, rtol=0.0, atol=1e-12)
    assert mgda.w_prev is not None
    torch.testing.assert_close(mgda.w_prev, _LAMBDA, rtol=0.0, atol=1e-12)


def test_documented_defaults():
    mgda = morl.build("mgda")
    assert (mgda.max_iter, mgda.tol, mgda.warm_start) == (100, 1e-8, False)
    mgda(torch.randn(3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    assert mgda.w_prev is None  # no warm start by default: no state kept


def test_options_reach_the_min_norm_solver(monkeypatch):
    """The solve gets the user's max_iter and tol, and no K = 2 guard (eps_2 = 0): its
    exact minimiser on the segment."""
    import morl.aggregators.mgda as mgda_module

    seen = {}
    real = mgda_module.min_norm_solve

    def spy(gram, **kwargs):
        seen.update({k: v for k, v in kwargs.items() if k != "init"})
        return real(gram, **kwargs)

    monkeypatch.setattr(mgda_module, "min_norm_solve", spy)
    gen = torch.Generator().manual_seed(0)
    j = torch.randn(4, 9, generator=gen, dtype=torch.float64)
    morl.build("mgda", max_iter=37, tol=1e-5)(j)
    assert seen == {"max_iter": 37, "tol": 1e-5, "eps_2": 0.0}


def test_a_warm_start_begins_at_the_previous_solution():
    """Orthogonal rows of norms 1, 1, 10: λ ∝ 1/‖g_k‖² = (1, 1, 0.01)/2.01. One Wolfe round on a
    second Jacobian from there is the solver's round from that λ, not the cold start's."""
    ja = torch.diag(torch.tensor([1.0, 1.0, 10.0], dtype=torch.float64))
    jb = torch.randn(3, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    warm, cold = build("mgda", warm_start=True, max_iter=1), build("mgda", max_iter=1)
    warm(ja)
    lam_a = torch.tensor([1.0, 1.0, 0.01], dtype=torch.float64) / 2.01
    torch.testing.assert_close(warm.weights, lam_a, rtol=0, atol=1e-12)
    warm(jb), cold(jb)
    from_a = min_norm_solve(jb @ jb.T, max_iter=1, init=lam_a, eps_2=0.0)[0]
    torch.testing.assert_close(warm.weights, from_a, rtol=0, atol=1e-12)
    assert (warm.weights - cold.weights).abs().max() > 1e-3
