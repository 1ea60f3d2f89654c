"""``adam_step`` (the loss weightings' Adam on buffers) against ``torch.optim.Adam`` on the same
gradients: parameters and both moments over several steps, with and without weight decay."""

import pytest
import torch

from morl.aggregators._adam import adam_step


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adam_step_matches_torch_optim_adam_over_steps(dtype, weight_decay):
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(5, generator=gen, dtype=dtype)
    reference = start.clone().requires_grad_(True)
    opt = torch.optim.Adam([reference], lr=0.05, weight_decay=weight_decay)
    param, m, v, step = start.clone(), torch.zeros_like(start), torch.zeros_like(start), torch.zeros((), dtype=dtype)
    for _ in range(6):
        grad = 3.0 * torch.randn(5, generator=gen, dtype=dtype)
        reference.grad = grad.clone()
        opt.step()
        param, m, v, step = adam_step(param, grad, m, v, step, lr=0.05, weight_decay=weight_decay)
        state = opt.state[reference]
        tol = 1e-6 if dtype == torch.float32 else 1e-14
        torch.testing.assert_close(param, reference.detach(), rtol=tol, atol=tol)
        torch.testing.assert_close(m, state["exp_avg"], rtol=tol, atol=tol)
        torch.testing.assert_close(v, state["exp_avg_sq"], rtol=tol, atol=tol)
    assert step.item() == 6.0


def test_the_first_step_moves_each_entry_by_the_learning_rate_against_its_gradient_sign():
    """Bias-corrected m / √v is sign(g) on step 1 (up to ε): every entry moves by lr."""
    param = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    grad = torch.tensor([4.0, -0.01, 7.0], dtype=torch.float64)
    zeros = torch.zeros(3, dtype=torch.float64)
    new, *_ = adam_step(param, grad, zeros, zeros, torch.zeros((), dtype=torch.float64), lr=0.1)
    torch.testing.assert_close(new, param - 0.1 * grad.sign(), rtol=0, atol=1e-7)
