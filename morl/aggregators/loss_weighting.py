"""Loss weightings (UW, DWA, FAMO, GLS, STCH, RLW): the K weights depend on the losses only, so
Σ_k w_k g_k is the gradient of Σ_k w_k L_k with w held: learners skip the [K, D] Jacobian
(``needs_grads = False``) and backpropagate ``agg.weighted_loss(losses)``. Learnable weight
parameters are stepped inside each call by their own optimizer, as the authors' code does.
"""

import torch

from morl.aggregators.base import Aggregator


class LossWeighting(Aggregator):
    """Base of the loss weightings: subclasses implement :meth:`loss_weights` (this step's [K]
    weights; advances the state once) and name their buffers in ``_STATE``."""

    needs_losses = True
    needs_grads = False

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        w = self.loss_weights(losses)
        self.weights = w
        return w @ grads

    def weighted_loss(self, losses: torch.Tensor) -> torch.Tensor:
        """Σ_k w_k L_k with this step's weights detached. The weights come from a call on the
        K×K identity (w @ I = w), so the non-finite policy applies to the losses unchanged."""
        if not isinstance(losses, torch.Tensor) or losses.dim() != 1 or losses.shape[0] < 1:
            raise ValueError(
                f"losses must be a [K] tensor with K >= 1, got {getattr(losses, 'shape', type(losses).__name__)}"
            )
        eye = torch.eye(losses.shape[0], dtype=losses.dtype, device=losses.device)
        w = self(eye, losses.detach())
        return (w.detach() * losses).sum()

    def _flag(self, name: str, losses: torch.Tensor) -> torch.Tensor:
        """A 0-d bool buffer (False before the first call) on the losses' device."""
        return self._get(name, torch.zeros((), dtype=torch.bool, device=losses.device))

    def _count(self, name: str, losses: torch.Tensor) -> torch.Tensor:
        """A 0-d counter buffer in the losses' dtype (0 before the first call)."""
        return self._get(name, losses.new_zeros(()))


def positive(losses: torch.Tensor) -> torch.Tensor:
    """Losses floored at ε·max_k |L_k| (at least tiny), for the log-loss methods (GLS, STCH): a
    loss ≤ 0 gets the largest weight that keeps w·g and its square finite."""
    info = torch.finfo(losses.dtype)
    return torch.maximum(losses, (info.eps * losses.abs().amax()).clamp_min(info.tiny))
