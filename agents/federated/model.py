"""Functional classifiers over one flat parameter vector, so clients × models vectorise with vmap.

A model here is a description (shapes) plus pure functions of ``θ [P]``; the m global models
are a ``[m, P]`` tensor. ``torch.func.vmap`` over models and clients then runs every local
update of a round as one batched computation.
"""

from __future__ import annotations

import math

import torch

KINDS = ("logreg", "mlp")


class FlatClassifier:
    """Multinomial logistic regression (``hidden=0``) or a one-hidden-layer ReLU MLP on ``θ [P]``."""

    def __init__(self, dim: int, num_classes: int, hidden: int = 0) -> None:
        if dim < 1 or num_classes < 2 or hidden < 0:
            raise ValueError(f"need dim >= 1, num_classes >= 2, hidden >= 0; got {dim}, {num_classes}, {hidden}")
        self.dim, self.num_classes, self.hidden = dim, num_classes, hidden
        layers = [(dim, num_classes)] if hidden == 0 else [(dim, hidden), (hidden, num_classes)]
        self.layers = layers
        self.num_params = sum(i * o + o for i, o in layers)

    def init(self, num_models: int, generator: torch.Generator) -> torch.Tensor:
        """``[num_models, P]`` independent initialisations (torch.nn.Linear's uniform ±1/√fan_in)."""
        chunks = []
        for fan_in, fan_out in self.layers:
            bound = 1.0 / math.sqrt(fan_in)
            w = (torch.rand(num_models, fan_in * fan_out + fan_out, generator=generator) * 2 - 1) * bound
            chunks.append(w)
        return torch.cat(chunks, dim=1)

    def logits(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[..., C]`` of inputs ``x [..., dim]`` under ``θ [P]``."""
        offset, h = 0, x
        for k, (fan_in, fan_out) in enumerate(self.layers):
            w = theta[offset : offset + fan_in * fan_out].reshape(fan_in, fan_out)
            offset += fan_in * fan_out
            b = theta[offset : offset + fan_out]
            offset += fan_out
            h = h @ w + b
            if k + 1 < len(self.layers):
                h = torch.relu(h)
        return h


def build(kind: str, dim: int, num_classes: int, hidden: int = 64) -> FlatClassifier:
    """``logreg`` (the MosT synthetic model) or ``mlp`` with ``hidden`` units."""
    if kind not in KINDS:
        raise ValueError(f"unknown model {kind!r}; allowed: {', '.join(KINDS)}")
    return FlatClassifier(dim, num_classes, 0 if kind == "logreg" else hidden)
