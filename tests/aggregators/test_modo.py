"""MoDo (Chen, Fernando, Ying, Chen, NeurIPS 2023, arXiv 2305.20057): λ ← Π_Δ(λ − γ(J₁J₂ᵀλ + ρλ))
against the authors' LibMTL ``backward`` (transcribed with its loop projection) and TorchJD
0.18's ``MoDoWeighting`` (fed A), a hand value, its fixed point (the ρ-regularised min-norm
weights, solved independently by morl.solvers.min_norm); the double-sampling contract is in
test_double_sampling.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build
from morl.solvers.min_norm import min_norm


def _jacobian(seed, k, d=None, shared=0.3, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    d = d or 2 * k + 3
    j = torch.randn(k, d, generator=gen, dtype=torch.float64) + shared * torch.randn(
        1, d, generator=gen, dtype=torch.float64
    )
    return j * scale


def authors_modo_projection(y):
    """LibMTL-MoDo's ``_projection2simplex`` (loop form)."""
    m = len(y)
    sorted_y = np.sort(y)[::-1]
    tmpsum = 0.0
    tmax_f = (np.sum(y) - 1.0) / m
    for i in range(m - 1):
        tmpsum += sorted_y[i]
        tmax = (tmpsum - 1) / (i + 1.0)
        if tmax > sorted_y[i + 1]:
            tmax_f = tmax
            break
    return np.maximum(y - tmax_f, 0)


@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_modo_matches_the_authors_update_and_torchjd(k):
    """λ ← Π(λ − γ(J₁J₂ᵀλ + ρλ)) over 4 calls, seeds 0..4, single and double sampling, against
    the authors' update (their loop projection) and TorchJD's MoDoWeighting fed A: ≤ 1e-12
    (measured ≤ 1.1e-16). d = Jᵀλ on the one sample or the mean of the two (the authors' code
    steps with the sum, i.e. 2d)."""
    for seed in range(5):
        for double in (False, True):
            agg, ref = build("modo", double_sampling=double), tj.MoDoWeighting(gamma=0.1, rho=0.1)
            lam = np.ones(k) / k
            for call in range(4):
                j1 = _jacobian(100 * seed + call, k, scale=0.5)
                j2 = _jacobian(100 * seed + call + 50, k, scale=0.5) if double else j1
                d = agg(torch.cat([j1, j2]) if double else j1)
                a = (j1 @ j2.T).numpy()
                lam = authors_modo_projection(lam - 0.1 * (a @ lam + 0.1 * lam))
                assert np.abs(agg.lam.numpy() - lam).max() <= 1e-12
                assert (ref(j1 @ j2.T) - agg.lam).abs().max() <= 1e-12
                assert np.allclose(d.numpy(), lam @ ((j1.numpy() + j2.numpy()) / 2), rtol=1e-12, atol=1e-14)


def test_modo_hand_value():
    """J = diag(2, 1): Aλ + ρλ = (2.05, 0.55) at λ = 1/2; λ − 0.1·that = (0.295, 0.445) sums to
    0.74, so the projection adds 0.13: λ = (0.425, 0.575), d = (0.85, 0.575)."""
    j = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    agg = build("modo")
    d = agg(j)
    assert torch.allclose(agg.lam, torch.tensor([0.425, 0.575], dtype=torch.float64), atol=1e-15)
    assert torch.allclose(d, torch.tensor([0.85, 0.575], dtype=torch.float64), atol=1e-15)


@pytest.mark.parametrize("double", [False, True])
def test_float32_gradients_get_the_float64_step_rounded_once(double):
    """A is taken in float64 (γ = ρ = 0.1 are not float32 numbers), λ rounded to float32 once.
    J below has the integer Gramian A = [[10, 1, 1], [1, 6, −1], [1, −1, 2]] (exact in float32;
    double sampling with J₁ = J₂ gives the same A). At λ⁰ = 1/3, Aλ⁰ = (4, 2, 2/3), the step
    λ⁰ − 0.1(Aλ⁰ + 0.1λ⁰) sums to 0.3233, the projection adds (2/3 + 0.01)/3 and keeps it
    interior: λ = 5/9 − 0.1·Aλ⁰ = (7, 16, 22)/45. A float32 A misses it by up to 3e-8."""
    j = torch.tensor([[3.0, 1.0, 0.0], [1.0, -2.0, 1.0], [0.0, 1.0, 1.0]])
    hand = torch.tensor([7.0, 16.0, 22.0], dtype=torch.float64) / 45
    for dtype in (torch.float64, torch.float32):
        agg = build("modo", double_sampling=double)
        agg(torch.cat([j, j]).to(dtype) if double else j.to(dtype))
        assert agg.lam.dtype == dtype
        if dtype == torch.float32:
            assert torch.equal(agg.lam, hand.float())
        else:
            assert (agg.lam - hand).abs().max() <= 1e-15


def test_modo_fixed_point_is_the_regularised_min_norm():
    """Repeated calls on a fixed J converge to argmin_Δ ½λᵀGλ + (ρ/2)‖λ‖² (morl.solvers.min_norm
    with rho). With γ = 1/(λ_max(G) + ρ) (stable below 2/(λ_max + ρ)) 200 calls reach it:
    measured 2.5e-12 over seeds 0..4, bound 1e-8."""
    for seed in range(3):
        j = _jacobian(seed, 4, 12, scale=0.3)
        g = j @ j.T
        agg = build("modo", gamma=1.0 / (torch.linalg.eigvalsh(g)[-1].item() + 0.1))
        for _ in range(200):
            agg(j)
        assert (agg.lam - min_norm(g, rho=0.1)).abs().max() <= 1e-8, seed


def test_a_zero_step_size_is_refused():
    with pytest.raises(ValueError, match="gamma"):
        build("modo", gamma=0.0)
