"""``torch.optim.Adam``'s step as a pure function of tensors, for the small learnable vectors of the
loss weightings (UW, FAMO, GradNorm), whose optimizer state lives in buffers."""

import torch

BETAS = (0.9, 0.999)
EPS = 1e-8


def adam_step(
    param: torch.Tensor,
    grad: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    step: torch.Tensor,
    lr: float,
    weight_decay: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(param, m, v, step)`` after one Adam step; ``step`` is a 0-d float tensor (no host read)."""
    b1, b2 = BETAS
    if weight_decay:
        grad = grad + weight_decay * param
    m = b1 * m + (1.0 - b1) * grad
    v = b2 * v + (1.0 - b2) * grad * grad
    step = step + 1.0
    denom = v.sqrt() / (1.0 - torch.pow(b2, step)).sqrt() + EPS
    return param - (lr / (1.0 - torch.pow(b1, step))) * m / denom, m, v, step
