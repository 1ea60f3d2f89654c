"""morl.solvers.gramian: J Jᵀ, its scale, the normalised Gramian and the ridge that makes a
rounded Gramian definite, against float64 products and numpy's eigenvalues."""

import numpy as np
import pytest
import torch
from jacobians import randomly_spread

from morl.solvers.gramian import definite_ridge, gram_scale, gramian, normalized_gramian

EPS32 = torch.finfo(torch.float32).eps


def _rows(seed: int, k: int, d: int, dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, d, generator=gen, dtype=torch.float64) + 0.5 * torch.randn(
        1, d, generator=gen, dtype=torch.float64
    )
    j[0] *= -2.0  # rows of different norms and a sign
    return j.to(dtype)


@pytest.mark.parametrize("scale", [1e-12, 1.0, 1e12])
@pytest.mark.parametrize("batched", [False, True])
def test_float32_gramian_in_the_normal_range_against_float64(scale, batched):
    """Rows of float32 entries ~scale (1e-12..1e12: G stays normal): G matches the float64
    product of the same rows to 1e-6 of its largest entry, for one matrix and a batch."""
    grads = _rows(0, 5, 300) * scale
    if batched:
        grads = torch.stack([grads, -_rows(1, 5, 300).abs() * scale])
    exact = grads.double() @ grads.double().transpose(-2, -1)
    gram = gramian(grads)
    assert gram.dtype == torch.float32 and gram.shape == exact.shape
    top = exact.diagonal(dim1=-2, dim2=-1).amax(-1)[..., None, None]
    assert bool(((gram.double() - exact).abs() <= 1e-6 * top).all())


def test_float64_rows_give_the_float64_gramian():
    grads = _rows(3, 12, 5000, torch.float64)
    exact = torch.from_numpy(grads.numpy() @ grads.numpy().T)
    assert float((gramian(grads) - exact).abs().max()) <= 1e-12 * float(exact.abs().max())


def test_overflow_and_nan_rows_show_on_the_diagonal():
    """Beyond float32's range the product is inf (the aggregators' non-finite policy reports it);
    a NaN row gives a NaN diagonal entry and leaves the others exact."""
    big = _rows(2, 3, 7) * 1e20
    assert torch.isinf(gramian(big).diagonal()).all()
    grads = _rows(2, 3, 7)
    grads[1, 4] = float("nan")
    gram = gramian(grads)
    assert torch.isnan(gram[1, 1]) and torch.isfinite(gram[0, 0]) and torch.isfinite(gram[2, 2])
    exact = grads[[0, 2]].double() @ grads[[0, 2]].double().T
    torch.testing.assert_close(gram[[0, 2]][:, [0, 2]].double(), exact, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, None])
def test_normalized_gramian_is_g_over_its_largest_diagonal_entry(dtype):
    """(G / s, s), s = max_k ‖g_k‖², per member of a batch; dtype None keeps the input's dtype;
    an all-zero matrix has s = 1 (G / s = 0, not NaN)."""
    grads = torch.stack([_rows(3, 4, 9), _rows(4, 4, 9) * 1e3, torch.zeros(4, 9)])
    gram, s = normalized_gramian(grads, dtype)
    exact = grads.double() @ grads.double().transpose(-2, -1)
    expected_s = exact.diagonal(dim1=-2, dim2=-1).amax(-1)
    expected_s[2] = 1.0
    assert gram.dtype == (dtype or torch.float32) and s.shape == (3,)
    torch.testing.assert_close(s.double(), expected_s, rtol=1e-6, atol=0)
    torch.testing.assert_close(gram.double(), exact / expected_s[:, None, None], rtol=1e-5, atol=1e-6)
    one, s_one = normalized_gramian(grads[1])  # one matrix: a 0-d scale
    assert s_one.shape == () and one.dtype == torch.float64


def test_gram_scale_is_one_for_tiny_or_zero_gramians():
    """At or below √(smallest normal) the largest diagonal entry is replaced by 1 (dividing by it
    would overflow the solvers' iterates); above, it is the entry itself."""
    tiny = torch.finfo(torch.float64).tiny ** 0.5
    grams = torch.stack([torch.eye(2, dtype=torch.float64) * v for v in (0.0, 0.5 * tiny, tiny, 2 * tiny, 3.0)])
    grams[4, 1, 1] = 7.0
    assert gram_scale(grams).flatten().tolist() == [1.0, 1.0, 1.0, 2 * tiny, 7.0]
    assert gram_scale(grams).shape == (5, 1, 1)


def _unit_min_eig(gram: torch.Tensor) -> float:
    g = gram.numpy()
    d = np.sqrt(np.maximum(np.diag(g), 1e-300))
    return float(np.linalg.eigvalsh(g / np.outer(d, d))[0])


@pytest.mark.parametrize("k", [3, 8, 16])
def test_definite_ridge_makes_the_row_scaled_gramian_semidefinite_and_no_more(k):
    """δ = ridge/2 against numpy's eigenvalues of D⁻¹GD⁻¹ (D² = diag G), on float32 Gramians of
    rank-deficient and stationary rows: D⁻¹GD⁻¹ + δI is semi-definite and 0.99δ would not do,
    unless δ is the floor ε/16; a batch gives each member's value; a NaN entry gives no error."""
    grams = []
    for seed in range(2):
        gen = torch.Generator().manual_seed(seed)
        for rank, stationary in ((2, False), (max(2, k // 2), True)):
            g32 = gramian(randomly_spread(gen, k, 2000, rank, 3.0 * seed, stationary).float()).double()
            grams.append(g32 / g32.diagonal().max())
    q = torch.linalg.qr(torch.randn(k, k, generator=torch.Generator().manual_seed(k), dtype=torch.float64))[0]
    lam = torch.linspace(-5 * k * EPS32, 2.0, k, dtype=torch.float64)
    grams.append(q @ torch.diag(lam) @ q.T)  # λ_min = −5Kε, before the unit-diagonal scaling
    deltas = definite_ridge(torch.stack(grams), torch.float32).flatten() / 2
    for gram, delta in zip(grams, deltas):
        low = _unit_min_eig(gram)
        assert low + float(delta) >= -1e-15
        assert float(delta) == EPS32 / 16 or low + 0.99 * float(delta) < 0
        assert float(definite_ridge(gram, torch.float32)) / 2 == pytest.approx(float(delta), rel=1e-12)
    assert float(deltas[-1]) > 4 * k * EPS32
    bad = grams[0].clone()
    bad[0, 1] = float("nan")
    assert definite_ridge(bad, torch.float32).shape == (1, 1)


def test_two_leading_batch_dimensions_give_each_members_scale_and_ridge():
    """[2, 3, K, K] inputs: normalized_gramian's s is [2, 3] and definite_ridge [2, 3, 1, 1], each
    member's value that of its matrix alone (numpy's largest diagonal entry and eigenvalues)."""
    grads = torch.stack(
        [torch.stack([_rows(3 * i + j, 4, 9, torch.float64) * 10.0**j for j in range(3)]) for i in range(2)]
    )
    gram, s = normalized_gramian(grads)
    assert gram.shape == (2, 3, 4, 4) and s.shape == (2, 3)
    k = 5
    grams = torch.empty(2, 3, k, k, dtype=torch.float64)
    for i in range(2):
        for j in range(3):
            g = grads[i, j].numpy() @ grads[i, j].numpy().T
            assert float(s[i, j]) == pytest.approx(np.diag(g).max(), rel=1e-12)
            np.testing.assert_allclose(gram[i, j].numpy(), g / np.diag(g).max(), rtol=1e-12, atol=1e-15)
            q = torch.linalg.qr(
                torch.randn(k, k, generator=torch.Generator().manual_seed(3 * i + j), dtype=torch.float64)
            )[0]
            lam = torch.linspace(-(3 * i + j + 1) * k * EPS32, 2.0, k, dtype=torch.float64)
            grams[i, j] = q @ torch.diag(lam) @ q.T  # a different negative eigenvalue per member
    ridge = definite_ridge(grams, torch.float32)
    assert ridge.shape == (2, 3, 1, 1)
    for i in range(2):
        for j in range(3):
            assert float(ridge[i, j]) / 2 == pytest.approx(max(-_unit_min_eig(grams[i, j]), EPS32 / 16), rel=1e-9)
