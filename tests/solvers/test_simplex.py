"""Simplex projection and the softmax map."""

import numpy as np
import pytest
import quadprog
import torch

from morl.solvers import project_simplex, softmax_map


def _quadprog_projection(v: np.ndarray) -> np.ndarray:
    k = v.shape[0]
    constraints = np.hstack([np.ones((k, 1)), np.eye(k)])
    return quadprog.solve_qp(np.eye(k), v, constraints, np.r_[1.0, np.zeros(k)], meq=1)[0]


@pytest.mark.parametrize("k", [1, 2, 3, 10, 57])
@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e3])
def test_projection_matches_qp_and_lies_in_simplex(k, scale, gen):
    v = torch.randn(20, k, generator=gen, dtype=torch.float64) * scale
    p = project_simplex(v)
    assert (p >= 0).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(20, dtype=torch.float64))
    ref = torch.tensor(np.stack([_quadprog_projection(row) for row in v.numpy()]))
    torch.testing.assert_close(p, ref, atol=1e-9 * max(scale, 1.0), rtol=0)


def test_projection_kkt_and_idempotent(gen):
    v = torch.randn(50, 8, generator=gen, dtype=torch.float64) * 3
    p = project_simplex(v)
    # KKT: p = max(v - theta, 0) with one theta per row
    for row_v, row_p in zip(v, p):
        support = row_p > 0
        theta = (row_v - row_p)[support]
        assert torch.allclose(theta, theta[0].expand_as(theta), atol=1e-12)
        assert (row_v[~support] <= theta[0] + 1e-12).all()
    torch.testing.assert_close(project_simplex(p), p, atol=1e-14, rtol=0)


def test_projection_batched_dims_and_float32(gen):
    v = torch.randn(3, 4, 6, generator=gen)
    p = project_simplex(v)
    assert p.shape == v.shape and p.dtype == torch.float32
    torch.testing.assert_close(p[1, 2], project_simplex(v[1, 2]))
    vertex = project_simplex(torch.tensor([5.0, 0.0, -1.0]))
    torch.testing.assert_close(vertex, torch.tensor([1.0, 0.0, 0.0]))


def test_softmax_map_is_not_a_projection():
    lam = torch.tensor([1.0, 0.0])
    out = softmax_map(lam)
    torch.testing.assert_close(out.sum(), torch.tensor(1.0))
    # a simplex point is pulled toward uniform: for M=2 the range is [1/(1+e), e/(1+e)] = [0.269, 0.731]
    assert abs(out[0].item() - 0.7311) < 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_projection_makes_every_tensor_on_the_inputs_device(dtype):
    """On the meta device (no data, like a GPU, any CPU-made operand raises) the projection runs
    and returns a meta tensor of the input's shape and dtype: no step builds its operands on the CPU."""
    p = project_simplex(torch.empty(3, 2, 5, device="meta", dtype=dtype))
    assert p.device.type == "meta" and p.shape == (3, 2, 5) and p.dtype == dtype
