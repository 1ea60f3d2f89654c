"""morl.solvers.min_norm against independent references: an exact support enumeration in
numpy (for a positive definite G the minimiser on a support S is G_S⁻¹1 / 1ᵀG_S⁻¹1; the optimum
is the best feasible candidate), quadprog's QP solution, a transcription of Wolfe's algorithm
from the paper, MoCo's Lemmas 5 and 6 (arXiv 2210.12624) and hand-built Gramians."""

import itertools

import numpy as np
import pytest
import quadprog
import torch
from jacobians import randomly_spread

from morl.solvers.min_norm import (
    EPS_2,
    kkt_violation,
    min_norm,
    min_norm_2,
    min_norm_gap,
    min_norm_solve,
    ridge_for,
    wolfe_steps,
)


def exact_min_norm(gram: np.ndarray) -> np.ndarray:
    k = gram.shape[0]
    best, best_val = None, np.inf
    for r in range(1, k + 1):
        for support in itertools.combinations(range(k), r):
            idx = list(support)
            x = np.linalg.solve(gram[np.ix_(idx, idx)], np.ones(r))
            lam = np.zeros(k)
            lam[idx] = x / x.sum()
            if lam.min() >= -1e-12 and (val := lam @ gram @ lam) < best_val:
                best, best_val = np.clip(lam, 0, None), val
    return best


def random_grams(batch: int, k: int, seed: int, shift: float = 0.0) -> torch.Tensor:
    # D = k + 6 > k rows: positive definite. A shared component (shift) makes some constraints
    # active, so the optimum mixes interior and zero weights.
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(batch, k, k + 6, generator=gen, dtype=torch.float64)
    g[..., 0] += shift
    return g @ g.transpose(-2, -1)


def with_a_dominated_row(k: int, seed: int, rho: float) -> torch.Tensor:
    """A [K, K] Gramian whose optimum has an active constraint on every seed: K − 1 random rows
    with min-norm point d (weights λ, multiplier μ = λᵀ(G + ρI)λ on the support), and a last
    row g = 2μ d / ‖d‖² + n with n ⟂ d, so g·d = 2μ > μ: λ padded with 0 stays optimal (KKT)."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(k, k + 6, generator=gen, dtype=torch.float64)
    rows[:-1, 0] += 2.0
    head = rows[:-1] @ rows[:-1].T
    lam = torch.from_numpy(exact_min_norm(head.numpy() + rho * np.eye(k - 1)))
    d = lam @ rows[:-1]
    mu = lam @ (head + rho * torch.eye(k - 1, dtype=torch.float64)) @ lam
    noise = rows[-1] - (rows[-1] @ d) / (d @ d) * d
    rows[-1] = 2 * mu * d / (d @ d) + noise
    return rows @ rows.T


def ridged(gram: np.ndarray, ridge: float) -> np.ndarray:
    """The problem the solver documents it solves: G + ridge·diag(G) (a relative ridge)."""
    return gram + ridge * np.diag(np.diag(gram))


def kkt_residual(gram: np.ndarray, lam: np.ndarray) -> float:
    """Largest violation of the min-norm KKT conditions on G / max diag: (Gλ)_k ≥ λᵀGλ for all
    k, with equality on the support. Zero exactly at the optimum (a convex QP)."""
    g = gram / np.diag(gram).max()
    grad, f = g @ lam, lam @ g @ lam
    return max(float((f - grad).max()), float(np.abs(grad - f)[lam > 1e-9].max()))


def _quadprog_min_norm(gram: np.ndarray, rho: float = 0.0) -> np.ndarray:
    k = gram.shape[0]
    s = gram.diagonal().max()
    q = gram / s + (rho / s + 1e-12) * np.eye(k)
    constraints = np.hstack([np.ones((k, 1)), np.eye(k)])
    return quadprog.solve_qp(q, np.zeros(k), constraints, np.r_[1.0, np.zeros(k)], meq=1)[0]


def _qp_optimum(gram: torch.Tensor) -> float:
    """min ½λᵀGλ over the simplex by quadprog (G + 1e-10·max diag·I: quadprog needs it
    positive definite; that moves the optimum's value by ≤ 1e-10·max diag)."""
    k = gram.shape[0]
    top = float(gram.diagonal().max())
    g = gram.numpy() / top + 1e-10 * np.eye(k)  # quadprog's tolerances are absolute: G / max diag
    constraints = np.hstack([np.ones((k, 1)), np.eye(k)])
    lam = quadprog.solve_qp(g, np.zeros(k), constraints, np.r_[1.0, np.zeros(k)], meq=1)[0]
    lam = torch.from_numpy(np.clip(lam, 0, None) / np.clip(lam, 0, None).sum())
    return float(0.5 * lam @ gram @ lam)


def _starts(k: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "centre": torch.full((k,), 1.0 / k, dtype=torch.float64),
        "vertex": torch.eye(k, dtype=torch.float64)[seed % k],
        "random": torch.rand(k, generator=gen, dtype=torch.float64),
    }


def _wolfe_transcribed(g: np.ndarray, lam: np.ndarray, rounds: int) -> tuple[np.ndarray, bool]:
    """Wolfe's algorithm (1976, "Finding the nearest point in a polytope", steps 1-3) for a
    unit-diagonal Gramian, written from the paper: on the support S take the affine minimiser
    y (y_S ∝ G_SS⁻¹1). If y ≥ 0 it is the new point (major cycle); then the row k of least
    (Gλ)_k enters S when it would shorten d ((Gλ)_k < λᵀGλ), else λ is optimal. If some
    y_i < 0, move λ towards y by θ = min λ_i/(λ_i − y_i) over those rows and drop the row
    that reaches 0 (minor cycle)."""
    support = lam > 0
    for _ in range(rounds):
        s = np.flatnonzero(support)
        y = np.zeros_like(lam)
        y[s] = np.linalg.solve(g[np.ix_(s, s)], np.ones(len(s)))
        y /= y.sum()
        if (y[s] >= 0).all():
            lam = y
            grad = g @ lam
            k = int(np.argmin(np.where(support, np.inf, grad)))
            if support.all() or grad[k] >= lam @ grad - 1e-8 * np.sqrt(lam @ grad):
                return lam, True
            support[k] = True
        else:
            neg = s[y[s] < 0]
            ratios = lam[neg] / (lam[neg] - y[neg])
            theta = min(ratios.min(), 1.0)
            lam = lam + theta * (y - lam)
            lam[neg[np.argmin(ratios)]] = 0.0
            lam = np.clip(lam, 0, None) / np.clip(lam, 0, None).sum()
            support = lam > 0
    return lam, False


def _unit_gramian(seed: int, k: int) -> np.ndarray:
    gen = np.random.default_rng(seed)
    j = gen.standard_normal((k, k + 6)) + 0.8 * gen.standard_normal(k + 6)  # correlated rows: a small min-norm point
    j /= np.linalg.norm(j, axis=1, keepdims=True)
    return j @ j.T


def _hard_gramian(seed: int, k: int, rank: int, stationary: bool) -> torch.Tensor:
    """Rank ``rank``, norms over 1e6; ``stationary``: a positive combination of rows is 0."""
    j = randomly_spread(torch.Generator().manual_seed(7919 * k + seed), k, 40, rank, 6.0, stationary)
    return j @ j.T


def _jacobian(gen, k, d, rank=None, scale=1.0):
    rank = rank or min(k, d)
    u = torch.randn(k, rank, generator=gen, dtype=torch.float64)
    v = torch.randn(rank, d, generator=gen, dtype=torch.float64)
    shared = torch.randn(1, d, generator=gen, dtype=torch.float64)
    return (u @ v / rank**0.5 + 0.5 * shared) * scale


def test_closed_form_tie_branches():
    g = torch.tensor([1.0, 2.0])
    same = torch.stack([g, g])
    torch.testing.assert_close(min_norm_2(same @ same.T), torch.tensor([0.0, 1.0]))  # g11 == g22: λ = 0
    short_first = torch.stack([g, 3 * g])
    torch.testing.assert_close(min_norm_2(short_first @ short_first.T), torch.tensor([1.0, 0.0]))
    short_second = torch.stack([3 * g, g])
    torch.testing.assert_close(min_norm_2(short_second @ short_second.T), torch.tensor([0.0, 1.0]))
    zero_row = torch.stack([torch.zeros(2), g])
    torch.testing.assert_close(min_norm_2(zero_row @ zero_row.T), torch.tensor([1.0, 0.0]))
    opposite = torch.stack([g, -g])
    torch.testing.assert_close(min_norm_2(opposite @ opposite.T), torch.tensor([0.5, 0.5]))


def test_lemma6_common_descent(gen):
    """⟨d, Σλ_k g_k⟩ ≥ ‖d‖² for every λ in the simplex (Lemma 6)."""
    for k in (2, 4, 12):
        j = _jacobian(gen, k, 30)
        d = min_norm(j @ j.T) @ j
        lam = torch.distributions.Dirichlet(torch.ones(k, dtype=torch.float64)).sample((200,))
        assert ((lam @ j) @ d >= d @ d - 1e-6 * (j.norm(dim=1).max() ** 2)).all()


def test_lemma5_regularisation_gap(gen):
    """0 ≤ ‖Gλ*_ρ‖² − ‖Gλ*‖² ≤ (ρ/2)(1 − 1/M) for (8) as written (MoCo's Lemma 5)."""
    for k in (2, 3, 6):
        j = _jacobian(gen, k, 20)
        gram = j @ j.T
        rho = 0.3 * gram.diagonal().mean().item()
        # (8): argmin ‖Jλ‖² + (ρ/2)‖λ‖²  ==  argmin ½‖Jλ‖² + (ρ/4)‖λ‖²
        lam_rho = min_norm(gram, rho=rho / 2)
        lam = min_norm(gram)
        gap = lam_rho @ gram @ lam_rho - lam @ gram @ lam
        assert -1e-9 <= gap.item() <= rho / 2 * (1 - 1 / k) + 1e-9


def test_regularised_closed_form_and_qp(gen):
    for k in (2, 5):
        j = _jacobian(gen, k, 10)
        gram = j @ j.T
        rho = 0.7
        lam = min_norm(gram, rho=rho)
        ref = torch.tensor(_quadprog_min_norm(gram.numpy(), rho=rho))
        torch.testing.assert_close(lam, ref, atol=1e-5, rtol=0)


def test_degenerate_inputs_are_finite():
    zeros = torch.zeros(5, 5)
    assert torch.isfinite(min_norm(zeros)).all()
    ones = torch.ones(7, 7)  # identical rows
    lam = min_norm(ones)
    assert torch.isfinite(lam).all() and abs(lam.sum().item() - 1) < 1e-6
    assert min_norm(torch.tensor([[4.0]])).item() == 1.0


@pytest.mark.parametrize("k", [2, 3, 5, 8])
@pytest.mark.parametrize("rho", [0.0, 0.3])
def test_batched_min_norm_equals_support_enumeration(k, rho):
    # three random Gramians (some have active constraints, depending on the draw) and one whose
    # last weight is 0 by construction, so the zero weights are checked whatever the seeds
    grams = torch.cat([random_grams(3, k, seed=k, shift=2.0), with_a_dominated_row(k, seed=k, rho=rho)[None]])
    lam = min_norm(grams, rho=rho)
    assert lam.shape == (4, k) and lam.dtype == torch.float64
    zeros = 0
    for b in range(4):
        work = grams[b].numpy() + rho * np.eye(k)
        ref = exact_min_norm(work)
        zeros += int((ref < 1e-9).sum())
        # the objective is what the solvers promise; λ itself is unique (G positive definite)
        np.testing.assert_allclose(lam[b].numpy() @ work @ lam[b].numpy(), ref @ work @ ref, rtol=1e-9)
        np.testing.assert_allclose(lam[b].numpy(), ref, atol=1e-6)
    assert zeros > 0 and lam[3, -1] == pytest.approx(0.0, abs=1e-9)  # some constraints are active


def test_float32_gramian_gives_the_float64_answer_to_float32_precision():
    grams = random_grams(2, 4, seed=7, shift=1.0)
    lam32 = min_norm(grams.to(torch.float32))
    assert lam32.dtype == torch.float32
    for b in range(2):
        np.testing.assert_allclose(lam32[b].double().numpy(), exact_min_norm(grams[b].numpy()), atol=1e-5)


def test_two_objectives_at_the_vertices_and_the_tie():
    # g₁·g₂ ≥ ‖g₁‖²: the shorter gradient itself is the min-norm point (λ = (1, 0));
    # identical gradients: every λ on the simplex is optimal, the result must still be on it.
    gram = torch.tensor(
        [
            [[1.0, 1.5], [1.5, 4.0]],  # g₁·g₂ = 1.5 ≥ ‖g₁‖² = 1
            [[9.0, 3.0], [3.0, 1.0]],  # the same with g₂ the shorter one
            [[2.0, 2.0], [2.0, 2.0]],
        ],  # g₁ = g₂
        dtype=torch.float64,
    )
    lam = min_norm(gram)
    torch.testing.assert_close(lam[0], torch.tensor([1.0, 0.0], dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(lam[1], torch.tensor([0.0, 1.0], dtype=torch.float64), rtol=0, atol=1e-12)
    assert (lam[2] >= 0).all() and abs(float(lam[2].sum()) - 1) < 1e-12


@pytest.mark.parametrize("rho", [0.0, 0.5])
def test_min_norm_gap_is_the_frank_wolfe_gap(rho):
    # gap(λ) = λ·∇ − min_k ∇_k with ∇ = Wλ, W = (G + ρI) / max diag(G + ρI): zero exactly at the
    # optimum, positive elsewhere.
    grams = random_grams(2, 4, seed=3, shift=1.0)
    gen = torch.Generator().manual_seed(4)
    lam = torch.softmax(torch.randn(2, 4, generator=gen, dtype=torch.float64), -1)
    gaps = min_norm_gap(grams, lam, rho=rho)
    assert gaps.shape == (2,)
    for b in range(2):
        w = grams[b].numpy() + rho * np.eye(4)
        w = w / np.diag(w).max()
        grad = w @ lam[b].numpy()
        np.testing.assert_allclose(float(gaps[b]), lam[b].numpy() @ grad - grad.min(), rtol=1e-12)
        assert float(gaps[b]) > 1e-3
        opt = torch.from_numpy(exact_min_norm(grams[b].numpy() + rho * np.eye(4)))
        assert abs(float(min_norm_gap(grams[b], opt, rho=rho))) < 1e-12


@pytest.mark.parametrize("k", [8, 14])
def test_iterative_path_is_exact_and_reports_convergence(k):
    # FISTA finds the support, Wolfe's steps make it exact: the KKT residual is at rounding level
    # and every entry says converged. Measured over 5 seeds x 2 entries: worst KKT residual 2.2e-16
    # (K=11) / 3.3e-16 (K=14), worst |λ − enumeration| 1.1e-13 (K=11); bounds 1e-12 and 1e-10.
    for seed in range(3):
        grams = random_grams(2, k, seed=100 + seed, shift=2.0)
        lam, done = min_norm_solve(grams)
        assert done.all()
        for b in range(2):
            lam_b = lam[b].numpy()
            assert lam_b.min() >= 0 and abs(lam_b.sum() - 1) < 1e-14
            assert kkt_residual(grams[b].numpy(), lam_b) < 1e-12
            if k == 8:
                np.testing.assert_allclose(lam_b, exact_min_norm(ridged(grams[b].numpy(), 1e-12)), rtol=0, atol=1e-10)


def test_warm_started_and_small_k_iterative_solves_are_exact():
    # a warm start from any feasible point (here a vertex) ends at the optimum in few rounds
    grams = random_grams(3, 6, seed=21, shift=2.0)
    init = torch.zeros(3, 6, dtype=torch.float64)
    init[:, 5] = 1.0
    lam, done = min_norm_solve(grams, init=init)
    assert done.all()
    for b in range(3):
        np.testing.assert_allclose(lam[b].numpy(), exact_min_norm(ridged(grams[b].numpy(), 1e-12)), rtol=0, atol=1e-10)


@pytest.mark.parametrize("k", [2, 3, 8])
def test_two_leading_batch_dims(k):
    # [2, 3, K, K]: every axis argument must count from the end.
    grams = random_grams(6, k, seed=31, shift=1.5).reshape(2, 3, k, k)
    lam, done = min_norm_solve(grams, eps_2=0.0)  # K = 2 without the guard: the exact minimiser
    assert lam.shape == (2, 3, k) and done.shape == (2, 3) and done.all()
    gaps = min_norm_gap(grams, lam)
    assert gaps.shape == (2, 3) and gaps.abs().max() < 1e-12
    for i in range(2):
        for j in range(3):
            ref = exact_min_norm(ridged(grams[i, j].numpy(), 1e-12))
            np.testing.assert_allclose(lam[i, j].numpy(), ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("scale", [1e-100, 1e-40, 1e40, 1e160])
@pytest.mark.parametrize("k", [3, 8])
def test_weights_do_not_depend_on_the_gramian_scale(scale, k):
    # λ*(sG) = λ*(G): the solvers work on G / max diag. At 1e160, G·s instead of G/s would
    # overflow float64. (Below ~1.5e-154 = sqrt(float64 tiny) gram_scale leaves G unscaled by
    # design, and the iterative path then misses the optimum: far outside the 1e-24..1e24 of
    # Gramians of gradients in the contract's 1e-12..1e12.)
    grams = random_grams(2, k, seed=41, shift=2.0)
    lam = min_norm(grams * scale)
    for b in range(2):
        np.testing.assert_allclose(lam[b].numpy(), exact_min_norm(ridged(grams[b].numpy(), 1e-12)), rtol=0, atol=1e-9)


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
    torch.testing.assert_close(
        min_norm(gram.flip(0, 1)), torch.tensor([0.0, 1.0], dtype=torch.float64), rtol=0, atol=1e-15
    )


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
        out = kkt_violation(
            torch.tensor(g).unsqueeze(0).expand(2, 3, 3), torch.tensor([lam] * 2, dtype=torch.float64), tol
        )
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
        np.testing.assert_allclose(
            lam[b].numpy(), exact_min_norm(ridged(g + 0.3 * np.eye(4), 1e-12)), rtol=0, atol=1e-12
        )


def test_pareto_stationary_rows_give_the_zero_combination():
    # g1 = (1, 0), g2 = (−1, δ), g3 = (−1, −δ): ½g1 + ¼g2 + ¼g3 = 0, so λ* = (½, ¼, ¼) while the
    # pair {g1, g2} is within δ²/4 = 2.5e-7 of it
    rows = torch.tensor([[1.0, 0.0], [-1.0, 1e-3], [-1.0, -1e-3]], dtype=torch.float64)
    lam = min_norm(rows @ rows.T)
    np.testing.assert_allclose(lam.numpy(), [0.5, 0.25, 0.25], rtol=0, atol=1e-6)


def test_float32_warm_start_for_a_float32_gramian():
    # aggregators pass λ of the previous step (float32) as init with a float32 Gramian
    g32 = random_grams(1, 11, seed=91, shift=2.0)[0].to(torch.float32)
    init = torch.full((11,), 1.0 / 11)
    lam, done = min_norm_solve(g32, init=init)
    assert lam.dtype == torch.float32 and bool(done)
    ref = exact_min_norm(ridged(g32.double().numpy(), ridge_for(torch.float32)))
    np.testing.assert_allclose(lam.double().numpy(), ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("k", [7, 9, 12])
def test_each_wolfe_round_is_the_papers_step(k):
    """wolfe_steps run for r = 1, 2, ... rounds equals the transcription after r rounds, from
    the simplex's centre (minor cycles first: the affine minimiser on all rows has negative
    weights) and from a vertex (major cycles adding rows), to 1e-10; both end optimal and
    agree on when. Unit-diagonal G with d = 1, no ridge: the solver's system is G itself."""
    minor_seen = 0
    for seed in range(3):
        g = _unit_gramian(seed, k)
        gt = torch.from_numpy(g)
        for lam0 in (np.full(k, 1.0 / k), np.eye(k)[seed % k]):
            for r in range(1, 2 * k + 4):
                want, done_want = _wolfe_transcribed(g, lam0.copy(), r)
                got, done = wolfe_steps(gt, torch.ones(k, dtype=torch.float64), torch.from_numpy(lam0.copy()), 1e-8, r)
                np.testing.assert_allclose(got.numpy(), want, atol=1e-10, err_msg=f"seed {seed}, {r} rounds")
                assert bool(done) == done_want, (seed, r)
                if done_want:
                    break
            assert done_want
            minor_seen += int(np.linalg.solve(g, np.ones(k)).min() < 0)
    assert minor_seen > 0  # the centre starts did take minor cycles


def test_a_batch_of_wolfe_problems_is_solved_as_each_alone():
    """Four problems of different lengths (two take minor cycles with different steps θ at
    once, one major cycles, one finishes at its start) in one batched call: each row of the
    result equals the problem solved alone, round by round (the masks, reductions, θ and the
    per-problem done flags act per problem)."""
    k = 9
    grams = [_unit_gramian(seed, k) for seed in (1, 2, 3, 4)]
    starts = [np.full(k, 1.0 / k), np.full(k, 1.0 / k), np.eye(k)[0], np.full(k, 1.0 / k)]
    starts[3] = _wolfe_transcribed(grams[3], starts[3].copy(), 60)[0]  # already optimal
    g = torch.from_numpy(np.stack(grams))
    lam0 = torch.from_numpy(np.stack(starts))
    for r in (1, 2, 3, 5, 8, 30):
        got, done = wolfe_steps(g, torch.ones(4, k, dtype=torch.float64), lam0.clone(), 1e-8, r)
        for i in range(4):
            alone, done_alone = wolfe_steps(g[i], torch.ones(k, dtype=torch.float64), lam0[i].clone(), 1e-8, r)
            np.testing.assert_allclose(got[i].numpy(), alone.numpy(), atol=1e-12, err_msg=f"problem {i}, {r} rounds")
            assert bool(done[i]) == bool(done_alone), (i, r)
    assert bool(done.all())


@pytest.mark.parametrize("k", [7, 10, 16, 24])
def test_cold_solves_of_float32_rank_deficient_and_stationary_gramians(k):
    """The cold path (active-set start, then Wolfe) on float32 Gramians of rank 2 and K/2, with
    and without a Pareto-stationary combination: every solve says converged, is feasible and
    within 4e-6 · max diag of quadprog's optimum for the float64 Gramian (the float32 ridge,
    16 ε ≈ 1.9e-6 of each row's squared norm, and G's own rounding move it by less: measured
    ≤ 4.3e-15 · max diag over 30 seeds, 480 solves, all converged, where the K + 10 Wolfe
    rounds alone left 2 unfinished); a batch of them is solved as each alone."""
    for seed in range(2):
        grams = [_hard_gramian(seed, k, rank, st) for rank in (2, k // 2) for st in (False, True)]
        batch = torch.stack(grams).float()
        lam_b, ok_b = min_norm_solve(batch)
        for i, gram in enumerate(grams):
            lam, ok = min_norm_solve(gram.float())
            assert ok.shape == () and bool(ok), (seed, i)
            torch.testing.assert_close(lam_b[i], lam, rtol=0, atol=1e-6)
            assert bool(ok_b[i])
            lam = lam.double()
            assert float(lam.min()) >= 0.0 and abs(float(lam.sum()) - 1.0) < 1e-6
            top = float(gram.diagonal().max())
            assert float(0.5 * lam @ gram @ lam) <= _qp_optimum(gram) + 4e-6 * top, (seed, i)


@pytest.mark.parametrize(
    "k, seed, init",
    [(24, 19, None), (24, 29, None), (16, 27, "centre"), (24, 12, "vertex"), (24, 15, "vertex"), (24, 19, "vertex")],
)
def test_instances_that_need_more_than_k_plus_10_wolfe_rounds(k, seed, init):
    """Found by the 30-seed sweeps above: cold solves of float32 stationary Gramians (rank K/2)
    and warm solves of float64 ones (rank K/2, norms over 1e6) that Wolfe's K + 10 rounds
    leave unfinished; the extra rounds (up to 3K more, on CPU) finish them at the
    optimum."""
    if init is None:
        gram = _hard_gramian(seed, k, k // 2, True)
        lam, ok = min_norm_solve(gram.float())
        lam, tol = lam.double(), 4e-6
    else:
        gram = randomly_spread(torch.Generator().manual_seed(1000 * k + seed), k, 40, k // 2, 6.0)
        gram = gram @ gram.T
        lam, ok = min_norm_solve(gram, init=_starts(k, seed)[init])
        tol = 1e-9
    assert bool(ok)
    top = float(gram.diagonal().max())
    assert float(0.5 * lam @ gram @ lam) <= _qp_optimum(gram) + tol * top


def test_flags_are_one_bool_per_problem_on_every_exit():
    """The converged flags are bools of the batch's shape, also where the cold start is already
    the optimum (nearly orthogonal rows: their min-norm weights, ∝ 1/‖g_k‖², are all positive,
    the first exit) and where Wolfe's steps run (one row made to conflict)."""
    gen = torch.Generator().manual_seed(0)
    agree = [torch.randn(8, 400, generator=gen, dtype=torch.float64) for _ in range(3)]
    conflict = [j.clone() for j in agree]
    for j in conflict:
        j[0] = -3.0 * j[1]
    for rows in (agree, conflict):
        grams = torch.stack([j @ j.T for j in rows])
        for gram in (grams, grams[0]):
            lam, ok = min_norm_solve(gram)
            assert ok.dtype == torch.bool and ok.shape == gram.shape[:-2] and bool(ok.all())
