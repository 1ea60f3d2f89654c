"""SDMGrad (Xiao, Ban, Ji, NeurIPS 2023, arXiv 2305.18409, Algorithm 1): against a numpy
transcription of the authors' ``sdmgrad`` (torch SGD's momentum rule, their numpy simplex
projection) and TorchJD 0.18's ``SDMGradWeighting`` (fed the K×K matrix A; it returns the
weights, ours d with ``agg.weights``), a hand value (the double-sampling contract: test_double_sampling.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build
from tests.simplex_reference import proj_simplex_np


def _jacobian(seed, k, d=None, shared=0.3, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    d = d or 2 * k + 3
    j = torch.randn(k, d, generator=gen, dtype=torch.float64) + shared * torch.randn(
        1, d, generator=gen, dtype=torch.float64
    )
    return j * scale


def authors_sdmgrad(j1, j2, w, lam=0.3, lr=10.0, momentum=0.5, niter=20, eps=0.0):
    """The authors' ``sdmgrad`` (½ wᵀAw + λ wᵀA w̃ by torch SGD with momentum, projected after
    each step), on A = J₁J₂ᵀ; their normaliser is mean sqrt(diag A + 1e-4) (``eps``). Their A
    comes from one batch; a cross product can have A_kk < 0, clamped at 0 (as TorchJD)."""
    a = j1 @ j2.T
    scale = np.mean(np.sqrt(np.maximum(np.diag(a), 0) + eps))
    a = a / (scale**2 if scale > 0 else 1.0)  # every A_kk ≤ 0: ours keeps A (their code: NaN)
    k = len(w)
    buf = None
    for _ in range(niter):
        grad = a @ w + lam * a @ (np.ones(k) / k)
        buf = grad if buf is None else momentum * buf + grad
        w = proj_simplex_np(w - lr * buf)
    return w


@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_sdmgrad_matches_the_authors_algorithm_over_calls(k):
    """Three consecutive calls (w carried over), single and double sampling, seeds 0..4:
    d = Jᵀ(w + λ/K)/(1 + λ) on the one sample or the mean of the two. The 20 projected steps
    of η = 10 are sensitive: float64 rounding differences (numpy's vs torch's order of sums)
    grow to 3.4e-7 in w and 4.5e-7 (relative) in d over 4 calls (measured, all K, seeds,
    both samplings); bound 1e-5."""
    for seed in range(5):
        for double in (False, True):
            agg = build("sdmgrad", double_sampling=double)
            w = np.ones(k) / k
            for call in range(3):
                j1 = _jacobian(100 * seed + call, k)
                j2 = _jacobian(100 * seed + call + 50, k) if double else j1
                d = agg(torch.cat([j1, j2]) if double else j1)
                w = authors_sdmgrad(j1.numpy(), j2.numpy(), w)
                assert np.abs(agg.w.numpy() - w).max() <= 1e-5, (seed, double, call)
                weights = (w + 0.3 / k) / 1.3
                expected = weights @ ((j1.numpy() + j2.numpy()) / 2)
                assert np.abs(d.numpy() - expected).max() <= 1e-5 * np.abs(expected).max()


@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_sdmgrad_matches_torchjd(k):
    """TorchJD's SDMGradWeighting (same defaults) fed A returns (w + λw̃)/(1 + λ). It divides A
    by s² + 1e-8 where ours divides by s²; 20 steps of η = 10 amplify that 1e-9 relative
    difference up to 8e-4 in the weights (measured), so TorchJD is fed 1e8·A, which it
    normalises back with a negligible guard (where every A_kk ≤ 0, s = 0: ours keeps A and
    TorchJD takes A/1e-8, so it is fed A). Measured ≤ 3.0e-9 over seeds 0..4, 4 calls; bound 1e-7."""
    for seed in range(5):
        for double in (False, True):
            ours = build("sdmgrad", double_sampling=double)
            ref = tj.SDMGradWeighting()
            for call in range(3):
                j1 = _jacobian(100 * seed + call, k)
                j2 = _jacobian(100 * seed + call + 50, k) if double else j1
                ours(torch.cat([j1, j2]) if double else j1)
                a = j1 @ j2.T
                expected = ref((1e8 if (torch.diagonal(a) > 0).any() else 1.0) * a)
                assert (ours.weights - expected).abs().max() <= 1e-7, (seed, double, call)


def test_sdmgrad_hand_value_and_scale():
    """J = diag(2, 1), one step: A/s² = diag(4, 1)/1.5², gradient Â(w + 0.15) at w = 1/2 is
    (1.1556, 0.2889); w − 10·grad = (−11.06, −2.39) projects to (0, 1); weights
    ((0, 1) + 0.15)/1.3; d = (2·0.15/1.3, 1.15/1.3). The weights do not depend on the scale
    (1e-3 here), unlike the authors' normaliser with its absolute 1e-4."""
    j = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    agg = build("sdmgrad", n_steps=1)
    d = agg(j)
    assert torch.allclose(agg.w, torch.tensor([0.0, 1.0], dtype=torch.float64), atol=1e-15)
    assert torch.allclose(d, torch.tensor([0.3 / 1.3, 1.15 / 1.3], dtype=torch.float64), atol=1e-15)
    j = _jacobian(0, 4)
    w1 = build("sdmgrad")(j) / 1.0
    w2 = build("sdmgrad")(1e-3 * j) / 1e-3
    assert torch.allclose(w1, w2, rtol=1e-9)
    official = authors_sdmgrad(1e-3 * j.numpy(), 1e-3 * j.numpy(), np.ones(4) / 4, eps=1e-4)
    assert np.abs(official - authors_sdmgrad(j.numpy(), j.numpy(), np.ones(4) / 4)).max() > 1e-3


@pytest.mark.parametrize("double", [False, True])
def test_float32_gradients_get_the_float64_weights_rounded_once(double):
    """A is taken in float64 (λ = 0.3 is not a float32 number), the weights rounded to float32
    once. J below has the integer Gramian A = [[10, 1, 1], [1, 6, −1], [1, −1, 2]] (exact in
    float32; double sampling with J₁ = J₂ gives the same A); the 20 steps end at the vertex
    w = (0, 1, 0), so the weights are (w + 0.1)/1.3 = (1, 11, 1)/13. A float32 A misses them
    by up to 7e-8."""
    j = torch.tensor([[3.0, 1.0, 0.0], [1.0, -2.0, 1.0], [0.0, 1.0, 1.0]])
    hand = torch.tensor([1.0, 11.0, 1.0], dtype=torch.float64) / 13
    for dtype in (torch.float64, torch.float32):
        agg = build("sdmgrad", double_sampling=double)
        agg(torch.cat([j, j]).to(dtype) if double else j.to(dtype))
        assert torch.equal(agg.w, torch.tensor([0.0, 1.0, 0.0], dtype=dtype))
        assert agg.weights.dtype == dtype
        if dtype == torch.float32:
            assert torch.equal(agg.weights, hand.float())
        else:
            assert (agg.weights - hand).abs().max() <= 1e-15


def test_sdmgrad_permutation_invariance_in_float64():
    """Symmetric by construction; in float64 the permuted call agrees to 1e-10 relative
    (measured 1.4e-16). In float32 the 20 steps of η = 10 amplify the rounding of A (8e-4)."""
    for seed in range(5):
        j = _jacobian(seed, 6, 20)
        perm = torch.randperm(6, generator=torch.Generator().manual_seed(seed))
        d, dp = build("sdmgrad")(j), build("sdmgrad")(j[perm])
        assert (d - dp).norm() <= 1e-10 * d.norm()


def test_a_zero_step_size_is_refused():
    with pytest.raises(ValueError, match="lr"):
        build("sdmgrad", lr=0.0)
