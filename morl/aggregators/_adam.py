"""A functional Adam step for the small learnable vectors of loss weightings (UW, FAMO, GradNorm).

The authors' code steps these vectors with ``torch.optim.Adam``; an optimizer object cannot
live in buffers, so the same update is written as a pure function of tensors that the
aggregator keeps in buffers (new tensors are returned, nothing is modified in place, as the
aggregator contract requires). It follows ``torch.optim.Adam`` (L2 ``weight_decay`` added to
the gradient, bias corrections from the step count) so the tests can compare with it.
"""

from __future__ import annotations

import torch

BETAS = (0.9, 0.999)
EPS = 1e-8


def adam_step(
    param: torch.Tensor, grad: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: torch.Tensor,
    lr: float, weight_decay: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(param, m, v, step)`` after one ``torch.optim.Adam`` step (default betas and eps).

    ``step`` is a 0-d float tensor (the number of steps taken so far), so the bias corrections
    are computed on the device without reading it back.
    """
    b1, b2 = BETAS
    if weight_decay:
        grad = grad + weight_decay * param
    m = b1 * m + (1.0 - b1) * grad
    v = b2 * v + (1.0 - b2) * grad * grad
    step = step + 1.0
    correction1 = 1.0 - torch.pow(b1, step)
    correction2 = 1.0 - torch.pow(b2, step)
    denom = v.sqrt() / correction2.sqrt() + EPS
    return param - (lr / correction1) * m / denom, m, v, step
