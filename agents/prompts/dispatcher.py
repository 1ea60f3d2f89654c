"""Dispatcher: routes each instance to one prompt of the mixture.

Following the MosT paper (§6.4), the dispatcher is cross-attention (Set Transformer, Lee et al.
2019, §3.1) between the frozen encoder's embedding ``q_i [d]`` of the instance (no prompt) and
the frozen encoder's embeddings ``p_j [d]`` of the ``m`` soft prompts:

    score_ij = ⟨LN(q_i) W_q, LN(p_j) W_k⟩ / √h  + b_j,        route(i) = argmax_j score_ij.

The paper leaves the training target UNCLEAR. Our choice: the MosT assignment itself. After
training, the per-instance losses of all prompts on the training set give the cost of one
more OT solve (the same marginals as training); the row-normalised plan ``Γ_i· / α_i`` is
the target distribution and the dispatcher minimises the cross-entropy to it. ``target="argmin"``
uses the prompt with the lowest loss instead (no balance constraint).
"""

from __future__ import annotations

import torch
from torch import nn

from morl.most import MosT


class Dispatcher(nn.Module):
    """Cross-attention scores ``[N, m]`` between instance and prompt embeddings."""

    def __init__(self, dim: int, hidden: int = 64, num_prompts: int = 1) -> None:
        super().__init__()
        self.norm_q, self.norm_k = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.query, self.key = nn.Linear(dim, hidden), nn.Linear(dim, hidden)
        self.bias = nn.Parameter(torch.zeros(num_prompts))
        self.hidden = hidden

    def forward(self, instances: torch.Tensor, prompts: torch.Tensor) -> torch.Tensor:
        q = self.query(self.norm_q(instances))
        k = self.key(self.norm_k(prompts))
        return q @ k.T / self.hidden**0.5 + self.bias

    @torch.no_grad()
    def route(self, instances: torch.Tensor, prompts: torch.Tensor) -> torch.Tensor:
        """The chosen prompt index ``[N]`` per instance."""
        return self(instances, prompts).argmax(-1)

    def fit(
        self,
        instances: torch.Tensor,
        prompts: torch.Tensor,
        targets: torch.Tensor,
        steps: int = 300,
        lr: float = 1e-2,
        weight_decay: float = 1e-4,
    ) -> float:
        """Full-batch Adam on the cross-entropy to soft ``targets [N, m]``; returns the final loss."""
        if targets.shape != (instances.shape[0], prompts.shape[0]):
            raise ValueError(
                f"targets must have shape [{instances.shape[0]}, {prompts.shape[0]}], got {tuple(targets.shape)}"
            )
        opt = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=weight_decay)
        for _ in range(steps):
            loss = -(targets * torch.log_softmax(self(instances, prompts), -1)).sum(-1).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return float(loss.detach())


def assignment_targets(losses: torch.Tensor, rule: str = "ot", most=None) -> torch.Tensor:
    """Soft targets ``[N, m]`` from training losses ``[m, N]``: the OT plan (rows normalised) or argmin."""
    if rule == "argmin":
        return nn.functional.one_hot(losses.argmin(0), losses.shape[0]).to(losses.dtype)
    if rule != "ot":
        raise ValueError(f"dispatcher target {rule!r} is not valid; allowed: ot, argmin")
    if most is None:
        most = MosT(losses.shape[0], warm_start=False)
    gamma = most.assign(losses.double())
    return (gamma / gamma.sum(-1, keepdim=True)).to(losses.dtype)
