"""What every loss weighting shares (morl/aggregators/loss_weighting.py): ``weighted_loss``'s
gradient is the gradient of the method's own scalarised objective, the non-finite policy on
the losses, the input shape, and state that refuses a change of K."""

from __future__ import annotations

import math

import pytest
import torch

from morl.aggregators import build
from tests.loss_weighting_helpers import close

WEIGHTINGS = ["uw", "dwa", "famo", "gls", "stch", "rlw"]


def _objectives(k):
    """Each method's scalarised objective at its first call (fresh state), as the papers write it."""
    z = torch.softmax(torch.randn(k, generator=torch.Generator().manual_seed(0), dtype=torch.float64), 0)
    return {
        "uw": lambda L: (0.5 * math.exp(0.5) * L).sum(),  # ½ e^{−s} L at s = −0.5
        "dwa": lambda L: L.sum(),  # w = 1 until two periods are complete
        "famo": lambda L: (torch.log(L + 1e-8) / k).sum() / (1.0 / (L.detach() + 1e-8)).mean(),  # z = 1/K, c held
        "gls": lambda L: L.prod() ** (1.0 / k),
        "stch": lambda L: 0.5 * torch.logsumexp(L / 0.5, 0),  # ideal="zero", μ = 0.5
        "rlw": lambda L: (z * L).sum(),  # softmax of the first N(0, I) draw of seed 0
    }


OPTIONS = {"uw": {"init_log_var": -0.5}, "stch": {"ideal": "zero", "mu": 0.5}, "rlw": {"seed": 0}}


@pytest.mark.parametrize("name", WEIGHTINGS)
def test_weighted_loss_has_the_gradient_of_the_methods_objective(name):
    """∇θ weighted_loss(L(θ)) = ∇θ objective(L(θ)): the one backward of the learners descends
    the method's scalarisation (weights held constant at this step's value)."""
    gen = torch.Generator().manual_seed(3)
    x, target = (
        torch.randn(5, 4, generator=gen, dtype=torch.float64),
        torch.randn(5, 3, generator=gen, dtype=torch.float64),
    )
    theta = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    losses = ((x @ theta - target) ** 2).mean(0)
    (expected,) = torch.autograd.grad(_objectives(3)[name](losses), theta, retain_graph=True)
    (got,) = torch.autograd.grad(build(name, **OPTIONS.get(name, {})).weighted_loss(losses), theta)
    close(got, expected, tol=1e-12)


def test_weighted_loss_takes_one_loss_and_refuses_other_shapes():
    agg = build("gls")
    close(agg.weighted_loss(torch.tensor([2.5], dtype=torch.float64)), 2.5)  # K = 1: w = 1
    for bad in ([1.0, 2.0], torch.ones(2, 2), torch.ones(0)):
        with pytest.raises(ValueError, match=r"^losses must be a \[K\] tensor with K >= 1"):
            agg.weighted_loss(bad)


@pytest.mark.parametrize("name", WEIGHTINGS)
def test_weighted_loss_non_finite_policies(name):
    """ "raise" names the first non-finite loss; "skip" zeroes the weights, counts the call and
    keeps every buffer; on the meta device nothing is read back."""
    with pytest.raises(ValueError, match="objective 1"):
        build(name).weighted_loss(torch.tensor([1.0, float("nan"), 2.0]))
    skip = build(name, check_finite="skip")
    skip.weighted_loss(torch.tensor([1.0, 2.0, 3.0]))
    before = {k: v.clone() for k, v in skip.state_dict().items() if isinstance(v, torch.Tensor)}
    out = skip.weighted_loss(torch.tensor([1.0, float("inf"), 2.0]))
    assert torch.equal(skip.weights, torch.zeros(3)) and int(skip.stats["nonfinite_steps"]) == 1
    assert not torch.isfinite(out)  # 0·inf: morl.backward zeroes the step, other learners guard theirs
    after = skip.state_dict()
    for key, value in before.items():
        if key.split(".")[-1] != "nonfinite_steps":
            assert torch.equal(after[key], value), key
    meta = build(name, check_finite="skip").weighted_loss(torch.empty(4, device="meta"))
    assert meta.device.type == "meta"


@pytest.mark.parametrize("name", ["uw", "famo", "stch"])
def test_state_refuses_another_k_until_reset(name):
    agg = build(name)
    agg.weighted_loss(torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\(K changed\?\); call reset\(\) first"):
        agg.weighted_loss(torch.ones(3, dtype=torch.float64))
    agg.reset()
    assert agg.weighted_loss(torch.ones(3, dtype=torch.float64)).shape == ()
