"""FAMO (Liu, Feng, Stone, Liu, NeurIPS 2023, arXiv 2306.03792, Algorithm 1). With z = softmax(ξ),
D_k = L_k − ℓ_k + 1e-8: w_k = z_k / (c D_k), c = Σ_k z_k / D_k. After the network's step ξ takes
one Adam step on z ⊙ (δ − zᵀδ), δ_k = log D_k(before) − log D_k(after), "after" measured on the
same batch by :meth:`update`, or else the next call's losses.
"""

import torch

from morl.aggregators._adam import adam_step
from morl.aggregators._checks import check_number
from morl.aggregators._preference import on_device
from morl.aggregators.loss_weighting import LossWeighting

OFFSET = 1e-8  # the authors' "+ 1e-8" inside the logs


class FAMO(LossWeighting):
    """FAMO. Options: ``w_lr`` (0.025, Adam's lr), ``gamma`` (0.001, weight decay), ``min_losses``
    ℓ (0.0; one float or K). State: ``logits``, Adam's ``m``, ``v``, ``step``, ``prev`` (the
    last call's losses) and ``pending`` (its ξ update is still due)."""

    needs_losses_after_step = True
    _STATE = ("logits", "m", "v", "step", "prev", "pending")
    _REPR = ("w_lr", "gamma", "min_losses")

    def __init__(
        self,
        w_lr: float = 0.025,
        gamma: float = 0.001,
        min_losses: float | list[float] = 0.0,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self.w_lr = check_number("FAMO", "w_lr", w_lr)
        self.gamma = check_number("FAMO", "gamma", gamma)
        offsets = check_number("FAMO", "min_losses", min_losses, low=-float("inf"), many=True)
        self.min_losses = offsets if isinstance(min_losses, (list, tuple)) else offsets[0]
        self._offsets: dict = {}

    def _gap(self, losses: torch.Tensor) -> torch.Tensor:
        """D = L − ℓ + 1e-8, floored at 1e-8."""
        offset = self.min_losses
        if not isinstance(offset, float):
            if len(offset) != losses.shape[0]:
                raise ValueError(f"FAMO option min_losses has {len(offset)} entries for K={losses.shape[0]} losses")
            offset = on_device(self._offsets, offset, losses)
        return (losses - offset + OFFSET).clamp_min(OFFSET)

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        self._step_logits(losses)  # the previous call's update, unless update() did it
        z = torch.softmax(self._get("logits", losses), dim=0)
        inv = z / self._gap(losses)
        self.prev = losses
        self.pending = torch.ones((), dtype=torch.bool, device=losses.device)
        return inv / inv.sum()  # = z_k / (c D_k), c = Σ z/D

    def update(self, losses_after: torch.Tensor) -> None:
        """Algorithm 1's logit step with the losses after the network's step (same batch)."""
        if self.prev is None:
            raise ValueError("FAMO.update(losses_after) must follow a call that computed weights")
        losses_after = losses_after.detach().reshape(-1).to(self.prev)
        if losses_after.shape != self.prev.shape:
            raise ValueError(f"losses_after must have shape {tuple(self.prev.shape)}, got {tuple(losses_after.shape)}")
        self._step_logits(losses_after)

    def _step_logits(self, after: torch.Tensor) -> None:
        # non-finite "after" losses (a step that blew up) skip the update instead of poisoning ξ
        pending = self._flag("pending", after) & torch.isfinite(after).all()
        xi = self._get("logits", after)
        delta = torch.log(self._gap(self._get("prev", after))) - torch.log(self._gap(after))
        z = torch.softmax(xi, dim=0)
        grad = z * (delta - (z * delta).sum())  # (∂z/∂ξ)ᵀ δ
        m, v, step = self._get("m", after), self._get("v", after), self._count("step", after)
        new = adam_step(xi, grad, m, v, step, self.w_lr, self.gamma)
        self.logits, self.m, self.v, self.step = (torch.where(pending, a, b) for a, b in zip(new, (xi, m, v, step)))
        self.pending = torch.zeros((), dtype=torch.bool, device=after.device)
