"""Mean: d = (1/K) Σ g_k with weights 1/K ("mean"), d = Σ g_k with weights 1 ("sum"), so d = wᵀJ;
and the loss whose gradient d is (learners backpropagate it once: ``needs_grads`` False)."""

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


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_weighted_loss_has_the_direction_as_its_gradient(reduction):
    """One backward of weighted_loss gives agg(J) with J the per-task gradients (autograd)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, generator=gen, dtype=torch.float64, requires_grad=True)
    a = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    losses = (a * x).sum(1) ** 2  # three task losses of x
    jac = torch.stack([torch.autograd.grad(losses[k], x, retain_graph=True)[0] for k in range(3)])
    agg = morl.build("mean", reduction=reduction)
    assert not agg.needs_grads and not agg.needs_losses
    (grad,) = torch.autograd.grad(agg.weighted_loss(losses), x)
    torch.testing.assert_close(grad, agg(jac), rtol=1e-12, atol=1e-12)
    assert agg.weighted_loss(torch.tensor([1.0, 2.0, 6.0])).item() == (3.0 if reduction == "mean" else 9.0)
    torch.testing.assert_close(
        agg.weights, torch.full((3,), 1 / 3 if reduction == "mean" else 1.0)
    )  # the weights reported


def test_mean_is_the_first_order_change_of_the_summed_losses():
    """Without losses too: Mean()(grads) needs nothing but the [K, D] matrix."""
    grads = torch.tensor([[1.0, -2.0], [3.0, 4.0]])
    assert morl.build("mean")(grads).tolist() == [2.0, 1.0]
