"""Min-norm solvers: closed form, iterative, regularised (MoCo's Lemmas 5 and 6,
Fernando et al., arXiv:2210.12624)."""

import numpy as np
import pytest
import quadprog
import torch

from morl.solvers import min_norm, min_norm_2, min_norm_gap, minimize_on_simplex


def _jacobian(gen, k, d, rank=None, scale=1.0):
    rank = rank or min(k, d)
    u = torch.randn(k, rank, generator=gen, dtype=torch.float64)
    v = torch.randn(rank, d, generator=gen, dtype=torch.float64)
    shared = torch.randn(1, d, generator=gen, dtype=torch.float64)
    return (u @ v / rank**0.5 + 0.5 * shared) * scale


def _quadprog_min_norm(gram: np.ndarray, rho: float = 0.0) -> np.ndarray:
    k = gram.shape[0]
    s = gram.diagonal().max()
    q = gram / s + (rho / s + 1e-12) * np.eye(k)
    constraints = np.hstack([np.ones((k, 1)), np.eye(k)])
    return quadprog.solve_qp(q, np.zeros(k), constraints, np.r_[1.0, np.zeros(k)], meq=1)[0]


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


@pytest.mark.parametrize("scale", [1e-12, 1.0, 1e12])
def test_closed_form_equals_iterative_and_qp(scale, gen):
    for _ in range(6):
        j = _jacobian(gen, 2, 5, scale=scale)
        gram = j @ j.T
        closed = min_norm_2(gram)
        work = gram / gram.diagonal().max()

        def fun(lam):
            glam = work @ lam
            return 0.5 * lam @ glam, glam

        iterative = minimize_on_simplex(fun, torch.full((2,), 0.5, dtype=torch.float64), 1.0 / work.trace(), max_iter=500)
        ref = torch.tensor(_quadprog_min_norm(gram.numpy()))
        d_closed, d_iter, d_ref = closed @ j, iterative @ j, ref @ j
        torch.testing.assert_close(d_closed, d_ref, atol=1e-6 * j.norm(), rtol=1e-6)
        torch.testing.assert_close(d_iter, d_ref, atol=1e-6 * j.norm(), rtol=1e-6)


@pytest.mark.parametrize("k", [3, 10, 50])
@pytest.mark.parametrize("scale", [1e-12, 1.0, 1e12])
def test_iterative_matches_quadprog_and_kkt(k, scale, gen):
    for rank in (1, max(1, k // 2), k):
        j = _jacobian(gen, k, 40, rank=rank, scale=scale)
        gram = j @ j.T
        lam = min_norm(gram)
        assert (lam >= 0).all() and abs(lam.sum().item() - 1) < 1e-12
        assert min_norm_gap(gram, lam).item() < 1e-6
        d = lam @ j
        d_ref = torch.tensor(_quadprog_min_norm(gram.numpy())) @ j
        assert (d - d_ref).norm() <= 1e-4 * j.norm(dim=1).max()


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


def test_batched_and_warm_start(gen):
    js = torch.stack([_jacobian(gen, 6, 15) for _ in range(4)])
    grams = js @ js.transpose(-1, -2)
    batched = min_norm(grams)
    for b in range(4):
        torch.testing.assert_close(batched[b] @ js[b], min_norm(grams[b]) @ js[b], atol=1e-6, rtol=1e-6)
    warm = min_norm(grams[0], init=batched[0], max_iter=1)
    torch.testing.assert_close(warm @ js[0], batched[0] @ js[0], atol=1e-6, rtol=1e-6)


def test_degenerate_inputs_are_finite():
    zeros = torch.zeros(5, 5)
    assert torch.isfinite(min_norm(zeros)).all()
    ones = torch.ones(7, 7)  # identical rows
    lam = min_norm(ones)
    assert torch.isfinite(lam).all() and abs(lam.sum().item() - 1) < 1e-6
    assert min_norm(torch.tensor([[4.0]])).item() == 1.0


def test_unguarded_closed_form_is_the_reference_branches(gen):
    """min_norm_2_unguarded (MGDA's K = 2 path, one clamp) equals min_norm_2(eps=0)'s three
    branches on random, colinear, opposite, equal and zero rows; worst measured 6.7e-16."""
    from morl.solvers.min_norm import min_norm_2_unguarded

    for i in range(300):
        j = _jacobian(gen, 2, 4, scale=10.0 ** (i % 7 - 3))
        if i % 5 == 1:
            j[1] = j[0] * (0.2 + 2 * torch.rand(1, generator=gen, dtype=torch.float64))
        if i % 5 == 2:
            j[1] = -j[0]
        if i % 5 == 3:
            j[1] = j[0]
        if i % 5 == 4:
            j[0] = 0.0
        gram = j @ j.T
        torch.testing.assert_close(min_norm_2_unguarded(gram), min_norm_2(gram, eps=0.0), atol=1e-12, rtol=0)
    g = torch.tensor([1.0, 2.0])
    assert min_norm_2_unguarded(torch.stack([g, 3 * g]) @ torch.stack([g, 3 * g]).T).tolist() == [1.0, 0.0]
    assert min_norm_2_unguarded(torch.stack([g, g]) @ torch.stack([g, g]).T).tolist() == [0.0, 1.0]
    # g1 = (1, 0), g2 = (0, 2): λ = 4/5 puts d = (0.8, 0.4) at the foot of the segment
    torch.testing.assert_close(min_norm_2_unguarded(torch.tensor([[1.0, 0.0], [0.0, 4.0]])), torch.tensor([0.8, 0.2]))
