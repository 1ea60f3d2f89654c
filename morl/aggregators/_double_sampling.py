"""Two independent gradient samples in one call, for the methods whose weight update needs an
unbiased estimate of J Jᵀ (MoDo, SDMGrad): E[J₁ J₂ᵀ] = E[J] E[J]ᵀ when the samples are independent,
while E[J Jᵀ] carries the gradients' covariance.

With ``double_sampling=True`` the caller stacks the two samples as ``grads = [J₁; J₂]``
([2K, D], rows k and K + k are objective k's gradient on two independent minibatches); the
weights are updated from A = J₁ J₂ᵀ and the direction is taken on the mean ½(J₁ + J₂). With
``double_sampling=False`` (one [K, D] sample) A = J Jᵀ: the practical single-sample variant.
"""

from __future__ import annotations

import torch

from morl.solvers.gramian import gramian


def objectives(grads: torch.Tensor, double_sampling: bool, owner: str) -> int:
    """K, the number of objectives in ``grads`` (half its rows when double sampling)."""
    if not double_sampling:
        return grads.shape[0]
    if grads.shape[0] % 2:
        raise ValueError(f"{owner} with double_sampling=True needs grads [2K, D] (two samples), got {grads.shape[0]} rows")
    return grads.shape[0] // 2


def cross_gramian(grads: torch.Tensor, double_sampling: bool) -> torch.Tensor:
    """A = J₁ J₂ᵀ (two samples, not symmetric) or J Jᵀ (one sample), in the gradients' dtype."""
    if not double_sampling:
        return gramian(grads)
    k = grads.shape[0] // 2
    return grads[:k] @ grads[k:].transpose(0, 1)


def direction(weights: torch.Tensor, grads: torch.Tensor, double_sampling: bool) -> torch.Tensor:
    """Σ_k w_k g_k on the one sample, or on the mean of the two (no [K, D] copy)."""
    if not double_sampling:
        return weights @ grads
    return torch.cat([weights, weights]) @ grads * 0.5
