"""morl.solvers.min_norm on batches, against an independent exact solver written here.

Reference: for a positive definite G the minimiser of λᵀGλ on the simplex restricted to a
support S is G_S⁻¹1 / 1ᵀG_S⁻¹1 (stationarity with one multiplier for Σλ = 1); the optimum is the
best candidate that is feasible (λ ≥ 0). Enumerating all 2^K − 1 supports in numpy float64 is
exact and shares nothing with the solver (its closed form, support enumeration in torch for
K ≤ 6, active-set start + Wolfe steps above). Batches [B, K, K] check that every leading-dim
axis is handled; K = 8 and 11 exercise the active-set path; ρ the MoCo regulariser ½ρ‖λ‖².
"""

import itertools

import numpy as np
import pytest
import torch

from morl.solvers.min_norm import min_norm, min_norm_gap


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


@pytest.mark.parametrize("k", [2, 3, 5, 8, 11])
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
        [[[1.0, 1.5], [1.5, 4.0]],  # g₁·g₂ = 1.5 ≥ ‖g₁‖² = 1
         [[9.0, 3.0], [3.0, 1.0]],  # the same with g₂ the shorter one
         [[2.0, 2.0], [2.0, 2.0]]],  # g₁ = g₂
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
