"""GLS (Chennupati et al., CVPR Workshops 2019, arXiv 1904.08492): the weights are the gradient
of the geometric mean of the losses, computed by autograd here."""

from __future__ import annotations

import pytest
import torch

from morl.aggregators import build
from tests.loss_weighting_helpers import autograd_weights, close, loss_sequence


@pytest.mark.parametrize("seed", range(3))
def test_gls_is_the_gradient_of_the_geometric_mean(seed):
    gen = torch.Generator().manual_seed(seed)
    k = 2 + 2 * seed
    agg = build("gls")
    for losses in loss_sequence(gen, k, 4, low=0.01, high=20.0):
        close(agg.loss_weights(losses), autograd_weights(lambda x: x.prod() ** (1.0 / k), losses))


def test_gls_hand_values_and_no_underflow():
    close(build("gls").loss_weights(torch.tensor([1.0, 4.0], dtype=torch.float64)), [1.0, 0.25])
    small = torch.full((200,), 1e-3, dtype=torch.float64)  # Π L = 1e-600 underflows; the weights do not
    close(build("gls").loss_weights(small), torch.full((200,), 1.0 / 200, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gls_floors_non_positive_losses_at_eps_times_the_largest(dtype):
    """A zero or negative loss (an RL actor loss, say) counts as ε·max_k |L_k| (ε of the dtype),
    so its weight is large but finite: losses (−5, 0, 1000) are read as (f, f, 1000) with
    f = 1000 ε, and w_k = (f · f · 1000)^(1/3) / (3 L_k)."""
    f = 1000.0 * torch.finfo(dtype).eps
    expected = torch.tensor([f, f, 1000.0], dtype=torch.float64)
    expected = (f * f * 1000.0) ** (1.0 / 3.0) / (3.0 * expected)
    got = build("gls").loss_weights(torch.tensor([-5.0, 0.0, 1000.0], dtype=dtype))
    close(got, expected, tol=1e-5 if dtype == torch.float32 else 1e-12)
