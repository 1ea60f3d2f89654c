"""Loss weightings: methods whose K weights depend on the losses only (UW, DWA, FAMO, GLS, STCH, RLW).

Their direction is Σ_k w_k g_k with weights w that never look at the gradients, so it is
also the gradient of the weighted loss Σ_k w_k L_k with w held constant. A learner can then
skip the [K, D] per-task Jacobian and run ONE backward (``needs_grads = False``):

    loss = agg.weighted_loss(losses)   # Σ_k w_k L_k, w detached: this step's weights
    loss.backward()                    # .grad = Σ_k w_k ∇L_k

``morl.backward``, MT-SAC, the SB3 adapter and ``SupervisedMTL`` do exactly this when
``aggregator.needs_grads`` is False. Wherever a [K, D] matrix is at hand, ``agg(grads, losses)``
returns the same direction ``weights @ grads``.

Learnable weight parameters (UW's log σ², FAMO's logits) are updated INSIDE the call, by
their own optimizer step, as the authors' code does (FAMO's ``w_opt``; the FAMO authors'
MT10 UW baseline steps log σ² with its own Adam): the state lives in buffers and the user's
optimizer never sees it. Each call is one training step: it advances the state once.
"""

from __future__ import annotations

import torch

from morl.aggregators.base import Aggregator


class LossWeighting(Aggregator):
    """Base of the loss weightings. Subclasses implement :meth:`loss_weights`.

    ``loss_weights(losses)`` returns this step's ``[K]`` weights (detached) and advances the
    method's state; :meth:`aggregate` and :meth:`weighted_loss` both call it exactly once, so
    either way gives the same weights and the same state. ``_STATE`` names the buffers;
    ``_initial_state(name, like)`` gives a buffer's value before the first call.
    """

    needs_losses = True
    needs_grads = False
    _STATE: tuple[str, ...] = ()

    def __init__(self, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        for name in self._STATE:
            self.register_buffer(name, None)

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        w = self.loss_weights(losses).to(grads.dtype)
        self.weights = w
        return w @ grads

    def weighted_loss(self, losses: torch.Tensor) -> torch.Tensor:
        """Σ_k w_k L_k with this step's weights detached: its backward is ``weights @ J``.

        The weights come from a call on the K×K identity (w @ I = w), so the non-finite policy
        of :class:`Aggregator` applies to the losses unchanged: ``"raise"`` names the first
        non-finite loss; ``"skip"`` zeroes the weights, keeps every buffer as it was and counts
        the call in ``nonfinite_steps``. The loss is then 0·L, whose gradient is still NaN
        where ∇L is: ``morl.backward`` writes a zero step instead, other learners guard theirs.
        """
        if not isinstance(losses, torch.Tensor) or losses.dim() != 1 or losses.shape[0] < 1:
            raise ValueError(f"losses must be a [K] tensor with K >= 1, got {getattr(losses, 'shape', type(losses).__name__)}")
        eye = torch.eye(losses.shape[0], dtype=losses.dtype, device=losses.device)
        w = self(eye, losses.detach())
        return (w.detach() * losses).sum()

    def _get(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """Buffer ``name`` (its initial state before the first call), in ``like``'s dtype/device."""
        value = getattr(self, name)
        if value is None:
            return self._initial_state(name, like)
        if value.shape != like.shape:
            raise ValueError(
                f"{type(self).__name__}: state {name!r} has shape {tuple(value.shape)} but this call needs "
                f"{tuple(like.shape)} (K changed?); call reset() first"
            )
        return value.to(device=like.device, dtype=like.dtype)

    def _flag(self, name: str, losses: torch.Tensor) -> torch.Tensor:
        """A 0-d bool buffer (False before the first call) on the losses' device."""
        return self._get(name, torch.zeros((), dtype=torch.bool, device=losses.device))

    def _count(self, name: str, losses: torch.Tensor) -> torch.Tensor:
        """A 0-d counter buffer in the losses' dtype (0 before the first call)."""
        return self._get(name, losses.new_zeros(()))


def positive(losses: torch.Tensor) -> torch.Tensor:
    """Losses floored at ε·max_k |L_k| (ε of the dtype; at least its smallest normal number).

    The log-loss methods (GLS, STCH's "nadir") are defined for L > 0 only; a zero or negative
    loss (an RL actor loss, say) then gets the largest weight that keeps ``w · g`` and its
    square finite (1/(ε max|L|) relative to the others), instead of 1/tiny, which makes Adam's
    second moment overflow and freezes the step.
    """
    info = torch.finfo(losses.dtype)
    return torch.maximum(losses, (info.eps * losses.abs().amax()).clamp_min(info.tiny))
