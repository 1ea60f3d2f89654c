"""The flat-parameter classifiers of the federated backend (agents/federated/model.py): logits
under θ against torch.nn layers holding the same numbers, torch.nn.Linear's init bounds, and one
line per bad model."""

import math

import pytest
import torch

from morl.agents.federated.model import build


def _as_modules(model, theta):
    """torch.nn.Linear layers with θ's slices (θ stores each layer's [in, out] weight, then its bias)."""
    layers, offset = [], 0
    for fan_in, fan_out in model.layers:
        linear = torch.nn.Linear(fan_in, fan_out, dtype=theta.dtype)
        with torch.no_grad():
            linear.weight.copy_(theta[offset : offset + fan_in * fan_out].view(fan_in, fan_out).T)
            offset += fan_in * fan_out
            linear.bias.copy_(theta[offset : offset + fan_out])
            offset += fan_out
        layers += [linear, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


@pytest.mark.parametrize("kind, params", [("logreg", 5 * 3 + 3), ("mlp", 5 * 4 + 4 + 4 * 3 + 3)])
def test_logits_equal_torch_nn_layers_with_the_same_numbers(kind, params):
    model = build(kind, dim=5, num_classes=3, hidden=4)
    assert model.num_params == params
    gen = torch.Generator().manual_seed(0)
    theta = model.init(2, gen)[1].double()
    x = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(model.logits(theta, x), _as_modules(model, theta)(x), rtol=1e-12, atol=1e-12)


def test_init_draws_within_torch_linears_bound_per_layer():
    model = build("mlp", dim=16, num_classes=3, hidden=9)
    theta = model.init(50, torch.Generator().manual_seed(1))
    first = 16 * 9 + 9
    assert theta.shape == (50, model.num_params)
    assert theta[:, :first].abs().max() <= 1 / math.sqrt(16) and theta[:, first:].abs().max() <= 1 / math.sqrt(9)
    assert theta[:, :first].abs().max() > 0.9 / math.sqrt(16)  # the whole range is used


def test_a_bad_model_is_one_line():
    with pytest.raises(ValueError, match="unknown model 'cnn'; allowed: logreg, mlp"):
        build("cnn", 5, 3)
    with pytest.raises(ValueError, match="need dim >= 1, num_classes >= 2, hidden >= 0; got 5, 1, 0"):
        build("logreg", 5, 1)
