"""Scale handling for K×K Gramians, so solvers see numbers of order one at any gradient scale."""

from __future__ import annotations

import torch


def gram_scale(gram: torch.Tensor) -> torch.Tensor:
    """Largest diagonal entry of ``gram`` ([..., K, K]) as ``[..., 1, 1]``; 1 where it is 0 or tiny.

    Dividing by it leaves every solution on the simplex unchanged (the objectives are
    homogeneous in G) while keeping iterations away from under/overflow.
    """
    s = torch.diagonal(gram, dim1=-2, dim2=-1).amax(dim=-1, keepdim=True).unsqueeze(-1)
    tiny = torch.finfo(gram.dtype).tiny ** 0.5
    return torch.where(s > tiny, s, torch.ones_like(s))


def normalized_gramian(grads: torch.Tensor, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """``(G / s, s)`` for the rows of ``grads`` ([..., K, D]); the K×K result is in ``dtype``.

    Each [K, D] matrix is divided by its largest absolute entry before the product, so
    gradients from 1e-20 to 1e20 give a finite Gramian even in float32; ``s`` ([...], 0-d for
    one matrix) is the scale to multiply back (1 for an all-zero matrix). The [K, D] product runs
    in the input's dtype (a float64 copy of a large G costs 4x the float32 product); only the
    K×K result is promoted. Leading dimensions batch independent problems (e.g. m particles).
    """
    dims = (-2, -1)
    amax = torch.maximum(grads.amax(dim=dims, keepdim=True), -grads.amin(dim=dims, keepdim=True))  # no |G| copy
    amax = torch.where(amax > 0, amax, torch.ones_like(amax))
    g = grads * (1.0 / amax)
    gram = (g @ g.transpose(-2, -1)).to(dtype)
    s = gram_scale(gram)
    return gram / s, (s * amax.to(dtype) ** 2).squeeze(-1).squeeze(-1)
