"""A new learner, in one file: the worked example of docs/architecture.md.

A multi-task regressor: a shared trunk and one linear head per task. One update computes the
K per-task losses, lets ``morl.backward`` turn the shared trunk's per-task gradients into one
direction through any aggregator (the heads get their own task's gradient, which is what
the shared-trunk methods assume), and takes one optimizer step. A learner never imports
``morl.envs``: whoever runs it hands it the data. tests/test_examples.py runs exactly this file.
"""

from __future__ import annotations

import torch
from torch import nn

import morl


class MultiTaskRegressor(nn.Module):
    def __init__(self, in_dim: int, hidden: int, num_tasks: int, aggregator, lr: float = 0.05) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(in_dim, hidden), nn.Tanh())
        self.heads = nn.Linear(hidden, num_tasks)  # column k is task k's head
        self.aggregator = aggregator  # a submodule: its state is in this learner's state_dict
        self.opt = torch.optim.SGD(self.parameters(), lr=lr)

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """[K] mean squared errors, task k scored on its own output column."""
        return (self.heads(self.trunk(x)) - y).pow(2).mean(dim=0)

    def update(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.opt.zero_grad()
        losses = self.losses(x, y)
        # Heads: each loss reaches only its own head, so the plain sum is task k's gradient there.
        head_grads = torch.autograd.grad(losses.sum(), list(self.heads.parameters()), retain_graph=True)
        morl.backward(losses, list(self.trunk.parameters()), self.aggregator)
        for p, g in zip(self.heads.parameters(), head_grads):
            p.grad = g
        self.opt.step()
        return losses.detach()
