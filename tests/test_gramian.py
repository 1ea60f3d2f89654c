"""morl.solvers.gramian: the chunked CPU product (6 ≤ K ≤ 10, large D) and the two-block one
(K ≥ TRIANGLE_K) are the Gramian."""

import pytest
import torch

from morl.solvers.gramian import CHUNK, CHUNKED_K, TRIANGLE_K, gramian, gramian_and_top


@pytest.mark.parametrize("k", [CHUNKED_K[0], 8, CHUNKED_K[1]])
def test_chunked_product_against_float64(k):
    """Column chunks of CHUNK summed in float32: relative error ≤ 1e-6 of the largest entry
    against the float64 product (measured ≤ 6e-7 over 5 seeds; a dropped or doubled chunk costs
    ~CHUNK/D ≈ 0.2). D is not a multiple of CHUNK, so the ragged last chunk is covered."""
    d = 4 * CHUNK + 123
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        grads = torch.randn(k, d, generator=gen) + 0.5 * torch.randn(1, d, generator=gen)
        exact = grads.double() @ grads.double().T
        gram = gramian(grads)
        assert gram.dtype == torch.float32 and gram.shape == (k, k)
        assert float((gram.double() - exact).abs().max()) <= 1e-6 * float(exact.abs().max())
        torch.testing.assert_close(gram, gram.T, rtol=1e-6, atol=1e-6 * float(exact.abs().max()))


def test_top_is_the_largest_diagonal_entry_and_absent_off_cpu():
    grads = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    gram, top = gramian_and_top(grads)
    assert top == 25.0 and gram.tolist() == [[25.0, 3.0], [3.0, 1.0]]
    assert gramian_and_top(grads.unsqueeze(0).expand(2, 2, 2))[1] is None  # batched: one top per matrix
    assert gramian_and_top(torch.zeros(2, 3))[1] is None  # all zero: the rescaled fallback decides
    meta = gramian_and_top(torch.empty(7, 5 * CHUNK, device="meta"))
    assert meta[0].device.type == "meta" and meta[0].shape == (7, 7) and meta[1] is None


@pytest.mark.parametrize("k", [TRIANGLE_K, 101, 200])
def test_two_block_product_against_float64(k):
    """K ≥ TRIANGLE_K: the two-block product (3/4 of the products, mirrored) is the Gramian:
    relative error ≤ 1e-6 of the largest entry against float64 over 5 seeds (measured ≤ 3.2e-7;
    a missing or misplaced block is off by O(1)), exactly symmetric, odd K included."""
    d = CHUNK + 321
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        grads = torch.randn(k, d, generator=gen) + 0.5 * torch.randn(1, d, generator=gen)
        grads[seed] *= -3.0  # rows of different norms and a sign, so no block is interchangeable
        exact = grads.double() @ grads.double().T
        gram = gramian(grads)
        assert float((gram.double() - exact).abs().max()) <= 1e-6 * float(exact.abs().max())
        assert torch.equal(gram, gram.T)
