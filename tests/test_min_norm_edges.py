"""morl.solvers.min_norm where the mutation run (docs/testing.md) found the tests silent.

Every check compares with something computed here: the numpy support enumeration of
tests/test_min_norm_exact.py (exact for a positive definite G), the KKT conditions of the QP
(a certificate of optimality for a convex problem), or hand-built Gramians whose answer is
known in closed form. Themes: the iterative path (K > the enumeration limit, or a warm
start) must be exact and say it converged; two leading batch dims; the scale of G must not
matter (1e±160); the documented relative ridge (ridge_for(dtype)); the K = 2 closed form with
its eps guard and its tie; min_norm_gap's dtypes; kkt_violation's units and rounding floor.
"""

import numpy as np
import pytest
import torch

from morl.solvers.min_norm import (
    EPS_2, kkt_violation, min_norm, min_norm_2_host, min_norm_exact, min_norm_gap, min_norm_solve, ridge_for,
)
from test_min_norm_exact import exact_min_norm, random_grams


def ridged(gram: np.ndarray, ridge: float) -> np.ndarray:
    """The problem the solver documents it solves: G + ridge·diag(G) (a relative ridge)."""
    return gram + ridge * np.diag(np.diag(gram))


def kkt_residual(gram: np.ndarray, lam: np.ndarray) -> float:
    """Largest violation of the min-norm KKT conditions on G / max diag: (Gλ)_k ≥ λᵀGλ for all
    k, with equality on the support. Zero exactly at the optimum (a convex QP)."""
    g = gram / np.diag(gram).max()
    grad, f = g @ lam, lam @ g @ lam
    return max(float((f - grad).max()), float(np.abs(grad - f)[lam > 1e-9].max()))


@pytest.mark.parametrize("k", [11, 14])
def test_iterative_path_is_exact_and_reports_convergence(k):
    # FISTA finds the support, Wolfe's steps make it exact: the KKT residual is at rounding level
    # and every entry says converged. Measured over 5 seeds x 2 entries: worst KKT residual 2.2e-16
    # (K=11) / 3.3e-16 (K=14), worst |λ − enumeration| 1.1e-13 (K=11); bounds 1e-12 and 1e-10.
    for seed in range(5):
        grams = random_grams(2, k, seed=100 + seed, shift=2.0)
        lam, done = min_norm_solve(grams)
        assert done.all()
        for b in range(2):
            lam_b = lam[b].numpy()
            assert lam_b.min() >= 0 and abs(lam_b.sum() - 1) < 1e-14
            assert kkt_residual(grams[b].numpy(), lam_b) < 1e-12
            if k == 11:
                np.testing.assert_allclose(lam_b, exact_min_norm(ridged(grams[b].numpy(), 1e-12)), rtol=0, atol=1e-10)


def test_warm_started_and_small_k_iterative_solves_are_exact():
    # init sends K ≤ 10 to the iterative path too; any init (here a vertex) ends at the optimum.
    grams = random_grams(3, 6, seed=21, shift=2.0)
    init = torch.zeros(3, 6, dtype=torch.float64)
    init[:, 5] = 1.0
    lam, done = min_norm_solve(grams, init=init, max_iter=3)
    assert done.all()
    for b in range(3):
        np.testing.assert_allclose(lam[b].numpy(), exact_min_norm(ridged(grams[b].numpy(), 1e-12)), rtol=0, atol=1e-10)


@pytest.mark.parametrize("k", [2, 3, 11])
def test_two_leading_batch_dims(k):
    # [2, 3, K, K]: every axis argument must count from the end.
    grams = random_grams(6, k, seed=31, shift=1.5).reshape(2, 3, k, k)
    lam, done = min_norm_solve(grams, eps_2=0.0)  # K = 2 without the guard: the exact minimiser
    assert lam.shape == (2, 3, k) and done.shape == (2, 3) and done.all()
    gaps = min_norm_gap(grams, lam)
    assert gaps.shape == (2, 3) and gaps.abs().max() < 1e-12
    exact = min_norm_exact(grams) if k <= 10 else None
    for i in range(2):
        for j in range(3):
            ref = exact_min_norm(ridged(grams[i, j].numpy(), 1e-12))
            np.testing.assert_allclose(lam[i, j].numpy(), ref, rtol=0, atol=1e-9)
            if exact is not None:
                np.testing.assert_allclose(exact[i, j].numpy(), ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("scale", [1e-100, 1e-40, 1e40, 1e160])
@pytest.mark.parametrize("k", [3, 11])
def test_weights_do_not_depend_on_the_gramian_scale(scale, k):
    # λ*(sG) = λ*(G): the solvers work on G / max diag. At 1e160, G·s instead of G/s would
    # overflow float64. (Below ~1.5e-154 = sqrt(float64 tiny) gram_scale leaves G unscaled by
    # design, and the iterative path then misses the optimum: far outside the 1e-24..1e24 of
    # Gramians of gradients in the contract's 1e-12..1e12.)
    grams = random_grams(2, k, seed=41, shift=2.0)
    lam = min_norm(grams * scale)
    for b in range(2):
        np.testing.assert_allclose(lam[b].numpy(), exact_min_norm(ridged(grams[b].numpy(), 1e-12)), rtol=0, atol=1e-9)


def test_exact_solver_ridge_argument_and_defaults():
    # min_norm_exact solves min λᵀ(G + ridge·diag G)λ: an explicit ridge is used as given; the
    # default is ridge_for(gram's dtype): 1e-12 for float64, 16 ε ≈ 1.9e-6 for float32.
    gram = random_grams(1, 4, seed=51, shift=1.0)[0]
    g = gram.numpy()
    lam = min_norm_exact(gram, ridge=1e-2)
    np.testing.assert_allclose(lam.numpy(), exact_min_norm(ridged(g, 1e-2)), rtol=0, atol=1e-12)
    assert np.abs(exact_min_norm(ridged(g, 1e-2)) - exact_min_norm(g)).max() > 1e-4  # the ridge shows
    np.testing.assert_allclose(min_norm_exact(gram).numpy(), exact_min_norm(ridged(g, 1e-12)), rtol=0, atol=1e-12)
    # float32 in: computed in float64 (float64 out), with the float32 ridge
    g32 = gram.to(torch.float32)
    out = min_norm_exact(g32)
    assert out.dtype == torch.float64
    ref32 = exact_min_norm(ridged(g32.double().numpy(), ridge_for(torch.float32)))
    np.testing.assert_allclose(out.numpy(), ref32, rtol=0, atol=1e-12)


def test_float32_gramians_are_solved_with_the_float32_ridge():
    # min_norm on a float32 Gramian solves G + ridge_for(float32)·diag G (16 ε ≈ 1.9e-6) on every
    # path. Rows e0 + 0.01 h_k (h_k ⟂ e0) put the decision in a 1e-4 part of G, where that ridge
    # moves λ by 5.4e-4 in the median (K = 3; 1.6e-6 at the least, 9.3e-5 at the 5 % quantile,
    # seeds 0..199), while the solver agrees with the ridged reference to ≤ 3.0e-8 (K = 3, bound
    # 1e-6) and its KKT residual on the ridged problem is ≤ 2.9e-8 (K = 11, bound 1e-7; with the
    # float64 ridge 1e-12 instead it would be ≥ 2.7e-7). So the ridge must show (> 1e-4, 100x
    # the agreement bound) on at least one of the six K = 3 draws: all six below has odds ~1e-8.
    effects = []
    for seed in range(6):
        for k in (3, 11):
            gen = torch.Generator().manual_seed(seed)
            rows = 0.01 * torch.randn(k, k + 6, generator=gen, dtype=torch.float64)
            rows[:, 0] = 1.0
            g32 = (rows @ rows.T).to(torch.float32)
            lam = min_norm(g32)
            assert lam.dtype == torch.float32
            g, lam = g32.double().numpy(), lam.double().numpy()
            if k == 3:
                ref = exact_min_norm(ridged(g, ridge_for(torch.float32)))
                np.testing.assert_allclose(lam, ref, rtol=0, atol=1e-6)
                effects.append(np.abs(exact_min_norm(ridged(g, 1e-12)) - ref).max())
            else:
                assert kkt_residual(ridged(g, ridge_for(torch.float32)), lam) < 1e-7
    assert max(effects) > 1e-4  # the ridge shows


def test_min_norm_2_is_the_documented_closed_form():
    # λ = (g22 − g12) / (g11 + g22 − 2 g12 + eps) on G / max diag when g12 < min(g11, g22).
    # Nearly identical rows (‖g1 − g2‖² = 2.1e-9 < eps = 1e-8) are where the guard decides λ:
    # by hand, 1.1e-9 / (2.1e-9 + 1e-8) = 0.0909 with the guard, 1.1 / 2.1 = 0.5238 without.
    g = np.array([[1.0, 1.0 - 1e-9], [1.0 - 1e-9, 1.0 + 1e-10]])
    for eps, hand in ((EPS_2, 0.0909), (0.0, 0.5238)):
        lam = min_norm_solve(torch.tensor(g), eps_2=eps)[0].numpy()
        s = g.diagonal().max()
        ref = ((g[1, 1] - g[0, 1]) / s) / ((g[0, 0] + g[1, 1] - 2 * g[0, 1]) / s + eps)
        np.testing.assert_allclose(lam, [ref, 1 - ref], rtol=1e-6, atol=0)
        assert abs(lam[0] - hand) < 1e-3


def test_min_norm_2_boundary_tie_is_the_vertex():
    # g1·g2 = ‖g1‖² < ‖g2‖²: g2 − g1 ⟂ g1, so g1 itself is the min-norm point: λ = (1, 0) exactly.
    gram = torch.tensor([[1.0, 1.0], [1.0, 4.0]], dtype=torch.float64)
    torch.testing.assert_close(min_norm(gram), torch.tensor([1.0, 0.0], dtype=torch.float64), rtol=0, atol=1e-15)
    torch.testing.assert_close(min_norm(gram.flip(0, 1)), torch.tensor([0.0, 1.0], dtype=torch.float64), rtol=0, atol=1e-15)


def test_min_norm_gap_regulariser_and_dtypes():
    # ρ = 0.3 is not a float32 number: the gap must be formed with ρ in float64. A float32 λ is
    # promoted (the gap of λ as given).
    grams = random_grams(2, 4, seed=3, shift=1.0)
    gen = torch.Generator().manual_seed(4)
    lam = torch.softmax(torch.randn(2, 4, generator=gen), -1)  # float32
    gaps = min_norm_gap(grams, lam, rho=0.3)
    assert gaps.dtype == torch.float64
    for b in range(2):
        w = grams[b].numpy() + 0.3 * np.eye(4)
        w = w / np.diag(w).max()
        l64 = lam[b].double().numpy()
        grad = w @ l64
        np.testing.assert_allclose(float(gaps[b]), l64 @ grad - grad.min(), rtol=1e-14)


def test_kkt_violation_units_and_rounding_floor():
    # kkt_violation(G_r, λ, tol)_k = (λᵀG_rλ − (G_rλ)_k) − tol‖g_k‖‖d‖ − 8Kε(‖g_k‖ + ‖d‖) on a
    # normalised Gramian: > 0 iff adding row k would shorten d by more than tol (relative) and
    # more than float64 rounding. Hand-built: λ = e1, ‖g1‖² = f = 1/4, ‖g_k‖² = 1, so
    # ‖g_k‖‖d‖ = 1/2, and (G_rλ)_k = 1/4 − δ_k exactly (δ chosen as exact binary fractions).
    k, eps = 3, np.finfo(np.float64).eps
    floor = 8 * k * eps * (1 + 0.5)
    cases = [(1e-3, 1.5e-3), (1e-3, 0.25e-3), (0.0, 0.5 * floor), (0.0, 4 * floor)]
    grams, lams = [], []
    for _, delta in cases:
        g = np.array([[0.25, 0.25 - delta, 0.0], [0.25 - delta, 1.0, 0.0], [0.0, 0.0, 1.0]])
        grams.append(g)
        lams.append([1.0, 0.0, 0.0])
    for (tol, delta), g, lam in zip(cases, grams, lams):
        out = kkt_violation(torch.tensor(g).unsqueeze(0).expand(2, 3, 3), torch.tensor([lam] * 2, dtype=torch.float64), tol)
        assert out.shape == (2, 3)
        d = 0.25 - g[1, 0]  # the δ actually stored
        np.testing.assert_allclose(out[:, 1].numpy(), d - tol * 0.5 - floor, rtol=1e-12, atol=1e-30)
        np.testing.assert_allclose(out[:, 2].numpy(), 0.25 - tol * 0.5 - floor, rtol=1e-12)
        assert (out[:, 1] > 0).all() == (delta > tol / 2 + floor)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_closed_forms_keep_dtype_and_shape(dtype):
    # K = 1 and K = 2 return λ in the Gramian's dtype, shaped [..., K], with a bool [...] flag.
    for k in (1, 2):
        gram = random_grams(1, k, seed=71)[0].to(dtype)
        lam, done = min_norm_solve(gram)
        assert lam.dtype == dtype and lam.shape == (k,) and done.dtype == torch.bool and done.shape == ()
        assert abs(float(lam.sum()) - 1) < 1e-6
    lam, done = min_norm_solve(torch.full((4, 1, 1), 2.0, dtype=dtype))
    assert lam.shape == (4, 1) and done.shape == (4,) and torch.equal(lam, torch.ones(4, 1, dtype=dtype))


def test_rho_enters_in_float64():
    # ρ = 0.3 is not a float32 number (0.3 − fl32(0.3) ≈ 1.2e-8): λ must be the float64 answer
    # for G + 0.3 I to 1e-12 (measured 5.6e-17; with ρ rounded to float32 λ moves 7.5e-10..2.1e-9).
    grams = random_grams(2, 4, seed=81, shift=1.0)
    lam = min_norm(grams / grams.diagonal(dim1=-2, dim2=-1).amax(-1)[:, None, None], rho=0.3)
    for b in range(2):
        g = grams[b].numpy() / np.diag(grams[b].numpy()).max()
        np.testing.assert_allclose(lam[b].numpy(), exact_min_norm(ridged(g + 0.3 * np.eye(4), 1e-12)), rtol=0, atol=1e-12)


def test_pareto_stationary_rows_give_the_zero_combination():
    # g1 = (1, 0), g2 = (−1, δ), g3 = (−1, −δ): ½g1 + ¼g2 + ¼g3 = 0, so λ* = (½, ¼, ¼) while the
    # pair {g1, g2} is within δ²/4 = 2.5e-7 of it: the first-tied-support rule must compare with
    # a tolerance relative to the optimum (≈ ridge level here), not an absolute one.
    rows = torch.tensor([[1.0, 0.0], [-1.0, 1e-3], [-1.0, -1e-3]], dtype=torch.float64)
    lam = min_norm_exact(rows @ rows.T)
    np.testing.assert_allclose(lam.numpy(), [0.5, 0.25, 0.25], rtol=0, atol=1e-6)


def test_float32_warm_start_for_a_float32_gramian():
    # aggregators pass λ of the previous step (float32) as init with a float32 Gramian
    g32 = random_grams(1, 11, seed=91, shift=2.0)[0].to(torch.float32)
    init = torch.full((11,), 1.0 / 11)
    lam, done = min_norm_solve(g32, init=init)
    assert lam.dtype == torch.float32 and bool(done)
    ref = exact_min_norm(ridged(g32.double().numpy(), ridge_for(torch.float32)))
    np.testing.assert_allclose(lam.double().numpy(), ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_min_norm_2_host_is_the_minimiser_on_the_segment(scale):
    """The K = 2 host closed form (MGDA's path for one small CPU Gramian, Python floats) against
    a direct minimisation of ‖λ g1 + (1 − λ) g2‖² over 200001 points of [0, 1]: an interior
    minimiser, both clamped ends (one row shorter than its projection), equal rows (λ = 0, the
    reference code's choice) and opposite rows, at scales where ‖g1 − g2‖² is below and above 1."""
    pairs = [([1.0, 0.2], [0.1, 1.0]), ([1.0, 0.0], [3.0, 0.5]), ([3.0, 0.5], [1.0, 0.0]),
             ([0.5, 0.5], [0.5, 0.5]), ([1.0, -2.0], [-1.0, 2.0])]
    grid = np.linspace(0.0, 1.0, 200001)
    for g1, g2 in pairs:
        g1, g2 = np.array(g1) * scale, np.array(g2) * scale
        gram = [[g1 @ g1, g1 @ g2], [g2 @ g1, g2 @ g2]]
        lam = min_norm_2_host(gram)
        assert lam[0] + lam[1] == 1.0 and 0.0 <= lam[0] <= 1.0
        norms = ((grid[:, None] * g1 + (1 - grid[:, None]) * g2) ** 2).sum(1)
        best = grid[np.flatnonzero(norms <= norms.min() * (1 + 1e-12) + 1e-300)]
        assert best.min() - 1e-5 <= lam[0] <= best.max() + 1e-5, (g1, g2, lam, best.min(), best.max())
        if np.array_equal(g1, g2):
            assert lam == [0.0, 1.0]
