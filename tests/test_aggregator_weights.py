"""Reported weights and the reduction option, where the mutation run (docs/testing.md) found them unpinned.

Mean: d = (1/K) Σ g_k with weights 1/K ("mean"), d = Σ g_k with weights 1 ("sum"), so d = wᵀJ.
PCGrad (Yu et al., NeurIPS 2020, arXiv:2001.06782, Alg. 1): "sum" is the algorithm's Σ_i g_i^PC,
"mean" divides it by K; both from the same projections (same seed).
"""

import pytest
import torch

import morl


@pytest.mark.parametrize("k", [1, 3, 7])
def test_mean_weights_and_reductions(k):
    gen = torch.Generator().manual_seed(k)
    grads = torch.randn(k, 11, generator=gen, dtype=torch.float64)
    mean, total = morl.build("mean"), morl.build("mean", reduction="sum")
    d_mean, d_sum = mean(grads), total(grads)
    torch.testing.assert_close(mean.weights, torch.full((k,), 1.0 / k, dtype=torch.float64))
    torch.testing.assert_close(total.weights, torch.ones(k, dtype=torch.float64))
    torch.testing.assert_close(d_mean, grads.sum(0) / k)
    torch.testing.assert_close(d_sum, grads.sum(0))
    torch.testing.assert_close(mean.weights @ grads, d_mean)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_pcgrad_sum_is_k_times_mean(k):
    gen = torch.Generator().manual_seed(10 + k)
    grads = torch.randn(k, 9, generator=gen, dtype=torch.float64)
    grads[1] = -0.8 * grads[0] + 0.3 * grads[1]  # a conflicting pair: projections happen
    d_mean = morl.build("pcgrad", seed=3)(grads)
    d_sum = morl.build("pcgrad", seed=3, reduction="sum")(grads)
    torch.testing.assert_close(d_sum, k * d_mean, rtol=1e-12, atol=1e-12)
    assert float((d_sum - d_mean).norm()) > 0.1 * float(d_mean.norm())
