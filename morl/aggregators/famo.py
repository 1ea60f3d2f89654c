"""FAMO, fast adaptive multitask optimization (B. Liu, Feng, Stone, Q. Liu, NeurIPS 2023,
arXiv 2306.03792, Algorithm 1).

Logits ξ, z = softmax(ξ), D_k = L_k − ℓ_k + 1e-8 (ℓ = ``min_losses``, 0 by default, the
authors' ``min_losses`` offset). The network descends Σ_k z_k log D_k / c with
c = Σ_k z_k / D_k held constant, i.e. the loss weights are

    w_k = z_k / (c D_k)        (Σ_k w_k D_k = 1: a convex combination of log-loss gradients)

After the network's step, with δ_k = log D_k(before) − log D_k(after), ξ takes one Adam
descent step (lr ``w_lr`` = 0.025, weight decay ``gamma`` = 0.001) on the authors' ``update``
gradient (∂z/∂ξ)ᵀδ = z ⊙ (δ − zᵀδ): tasks whose log-loss fell more than the z-average lose
weight, the others gain it.

The paper measures "after" on the SAME batch after the step: call :meth:`update` with those
losses. Without it, the next call uses its own losses (a new batch) as "after": one extra
forward saved, at the price of batch noise in δ (the authors' MT10 code recomputes the loss
on the same batch; LibMTL calls ``update_w`` from its trainer).
"""

from __future__ import annotations

import torch

from morl.aggregators._adam import adam_step
from morl.aggregators._checks import check_number
from morl.aggregators.loss_weighting import LossWeighting

OFFSET = 1e-8  # the authors' "+ 1e-8" inside the logs


class FAMO(LossWeighting):
    """FAMO loss weighting; see the module docstring.

    Options: ``w_lr`` (0.025), ``gamma`` (0.001) weight decay of the logits, ``min_losses``
    (0.0) the offset ℓ: one float for every task or K floats (the authors' ``set_min_losses``,
    e.g. known lower bounds of the losses); losses must stay above it (D is floored at 1e-8,
    where the weight saturates). State: ``logits``, Adam's ``m``, ``v``, ``step``,
    ``prev`` (the losses of the last call) and ``pending`` (its ξ update is still due).
    """

    #: learners call :meth:`update` with the losses after their step, on the same batch
    needs_losses_after_step = True
    _STATE = ("logits", "m", "v", "step", "prev", "pending")

    def __init__(self, w_lr: float = 0.025, gamma: float = 0.001, min_losses: float | list[float] = 0.0,
                 check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        check_number("FAMO", "w_lr", w_lr)
        check_number("FAMO", "gamma", gamma)
        per_task = isinstance(min_losses, (list, tuple))
        for value in (min_losses if per_task else [min_losses]):
            check_number("FAMO", "min_losses", value, low=-float("inf"))
        self.w_lr, self.gamma = float(w_lr), float(gamma)
        self.min_losses = tuple(float(v) for v in min_losses) if per_task else float(min_losses)
        self._offsets: dict[tuple, torch.Tensor] = {}  # per device/dtype: no host->device copy per call

    def _offset(self, losses: torch.Tensor) -> torch.Tensor | float:
        if isinstance(self.min_losses, float):
            return self.min_losses
        if len(self.min_losses) != losses.shape[0]:
            raise ValueError(f"FAMO option min_losses has {len(self.min_losses)} entries for K={losses.shape[0]} losses")
        key = (losses.device, losses.dtype)
        if key not in self._offsets:
            self._offsets[key] = torch.tensor(self.min_losses, dtype=losses.dtype, device=losses.device)
        return self._offsets[key]

    def _gap(self, losses: torch.Tensor) -> torch.Tensor:
        return (losses - self._offset(losses) + OFFSET).clamp_min(OFFSET)  # D = L − ℓ + 1e-8

    def loss_weights(self, losses: torch.Tensor) -> torch.Tensor:
        self._step_logits(losses)  # the previous call's update, unless update() did it
        z = torch.softmax(self._get("logits", losses), dim=0)
        inv = z / self._gap(losses)
        self.prev = losses
        self.pending = torch.ones((), dtype=torch.bool, device=losses.device)
        return inv / inv.sum()  # = z_k / (c D_k), c = Σ z/D

    def update(self, losses_after: torch.Tensor) -> None:
        """Algorithm 1's logit step with the losses measured after the network's step (same batch)."""
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
        # masked, not branched: whether an update is due is device state
        self.logits, self.m, self.v, self.step = (torch.where(pending, a, b) for a, b in zip(new, (xi, m, v, step)))
        self.pending = torch.zeros((), dtype=torch.bool, device=after.device)

    def __repr__(self) -> str:
        return f"FAMO(w_lr={self.w_lr:g}, gamma={self.gamma:g}, min_losses={self.min_losses})"
