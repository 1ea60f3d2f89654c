"""Multi-task loss-weight learning as a multi-objective bi-level problem, solved by FORUM.

As in FORUM's multi-task experiments (Ye et al., arXiv:2401.09257, §5.2 and App. D.2): α are the
loss weights (softmax of m logits, as in the official code), ω the multi-task model,
trained through the supervised adapter (:class:`morl.agents.supervised.multitask.SupervisedMTL`):

    min_{α, ω} (L_1(ω; B_UL), …, L_m(ω; B_UL))   s.t.  ω ∈ argmin_ω Σ_i softmax(α)_i L_i(ω; B_LL)

The lower-level batch B_LL comes from the training split. The upper-level batch B_UL comes from
the validation split (``upper_split="val"``, the paper's D_i^val) or from a second training batch
(``upper_split="train"``, what the official code does). The adapter supplies the per-task losses,
evaluation and checkpoints; its ``task_weights`` mirror m·softmax(α), so the learned weights
travel with its state.
"""

from __future__ import annotations

from typing import Literal

import torch

from morl.agents.supervised.multitask import SupervisedMTL
from morl.bilevel import FORUM

__all__ = ["LossWeightLearner"]

Batch = tuple[torch.Tensor, torch.Tensor]


class LossWeightLearner:
    """FORUM over (α: m loss-weight logits, ω: the adapter's model).

    Defaults are the paper's MTL settings: ρ = 0.1, T = 5 inner SGD steps with η = 0.1, Adam
    with lr 1e-3 on α; ω is stepped by the adapter's own optimizer (its lr / weight decay).
    ``normalize_upper`` rescales each ∇F_i to unit norm (the official code does; the paper
    does not say so). ``beta_power`` gives β_k = (k+1)^(−beta_power); pass ``beta`` to
    :meth:`step` for the code's per-epoch schedule.
    """

    def __init__(
        self,
        adapter: SupervisedMTL,
        num_tasks: int,
        *,
        alpha_lr: float = 1e-3,
        inner_lr: float = 0.1,
        inner_steps: int = 5,
        rho: float = 0.1,
        beta_power: float = 0.75,
        normalize_upper: bool = False,
        upper_split: Literal["val", "train"] = "val",
    ) -> None:
        if upper_split not in ("val", "train"):
            raise ValueError(f"upper_split={upper_split!r} is not valid; allowed: val, train")
        if num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")
        self.adapter = adapter
        self.upper_split = upper_split
        self.logits = torch.zeros(num_tasks, device=adapter.device, requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.logits], lr=alpha_lr)
        omega = adapter.shared_params + adapter.task_params
        self.forum = FORUM(
            [self.logits], omega, self._upper, self._lower,
            inner_steps=inner_steps, inner_lr=inner_lr, rho=rho, beta_power=beta_power,
            normalize_upper=normalize_upper, optimizer=[self.alpha_opt, adapter.optimizer],
        )  # fmt: skip

    def weights(self) -> torch.Tensor:
        """The current loss weights softmax(α) ([m], detached)."""
        return torch.softmax(self.logits.detach(), dim=0)

    def _lower(self, batch: Batch) -> torch.Tensor:
        return (torch.softmax(self.logits, dim=0) * self.adapter.task_losses(batch)).sum()

    def _upper(self, batch: Batch) -> torch.Tensor:
        return self.adapter.task_losses(batch)

    def step(self, lower_batch: Batch, upper_batch: Batch, beta: float | None = None) -> dict[str, torch.Tensor]:
        """One FORUM iteration on a training batch (LL) and an upper-level batch (UL)."""
        self.adapter.model.train()
        out = self.forum.step((lower_batch,), (upper_batch,), beta=beta)
        self.adapter.steps += 1
        out["weights"] = self.weights()
        return out

    def sync_adapter_weights(self) -> None:
        """Copy m·softmax(α) into the adapter's ``task_weights`` (reads the weights back once)."""
        self.adapter.task_weights = self.weights() * self.logits.shape[0]

    def state_dict(self) -> dict:
        self.sync_adapter_weights()
        return {
            "adapter": self.adapter.state_dict(),
            "logits": self.logits.detach().clone(),
            "forum": self.forum.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.adapter.load_state_dict(state["adapter"])
        with torch.no_grad():
            self.logits.copy_(state["logits"])
        self.forum.load_state_dict(state["forum"])
