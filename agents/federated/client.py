"""The client's work, shared by every strategy and both engines.

One client with data ``(x [S, d], y [S], count)`` receives the m global models ``θ [m, P]``
and returns, per model, its pseudo-gradient ``Δ_j = θ_j − θ_j^local`` after local SGD and its
loss ``L(θ_j)`` on the local training data (the objective value MosT transports on).
All models are trained at once (vmap over models); the in-process engine adds a vmap over
clients, a Flower ClientApp calls :func:`client_update` for its own partition. Randomness comes
from :func:`round_noise`, a function of (seed, round) only, so both engines draw the same batches.
"""

from __future__ import annotations

import torch
from torch.func import grad, vmap

from agents.federated.model import FlatClassifier


def masked_loss(model: FlatClassifier, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the first ``count`` rows of ``x`` (the rest is padding)."""
    logits = model.logits(theta, x)
    nll = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    valid = (torch.arange(x.shape[0], device=x.device) < count).to(nll.dtype)
    return (nll * valid).sum() / count.clamp_min(1).to(nll.dtype)


def masked_accuracy(model: FlatClassifier, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    pred = model.logits(theta, x).argmax(-1)
    valid = (torch.arange(x.shape[0], device=x.device) < count).to(torch.float32)
    return ((pred == y).to(torch.float32) * valid).sum() / count.clamp_min(1).to(torch.float32)


def round_noise(seed: int, round_idx: int, num_clients: int, num_models: int, steps: int, batch: int,
                device: torch.device | str = "cpu") -> torch.Tensor:
    """Uniforms ``[n, m, steps, batch]`` picking the local minibatches of round ``round_idx``."""
    gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(round_idx))
    return torch.rand(num_clients, num_models, steps, batch, generator=gen).to(device)


def _local_sgd(model: FlatClassifier, theta0: torch.Tensor, x, y, count, noise: torch.Tensor, lr: float, prox_mu: float):
    # One (model, client) pair: `steps` minibatch SGD steps, batch indices drawn from `noise`.
    def batch_loss(theta, idx):
        xb, yb = x[idx], y[idx]
        logits = model.logits(theta, xb)
        loss = torch.nn.functional.cross_entropy(logits, yb)
        # FedProx's proximal term (μ/2)‖θ − θ_global‖² (zero for every other strategy).
        return loss + 0.5 * prox_mu * ((theta - theta0) ** 2).sum()

    step_grad = grad(batch_loss)
    theta = theta0
    for s in range(noise.shape[0]):
        idx = (noise[s] * count.to(noise.dtype)).long().clamp_max(x.shape[0] - 1)
        theta = theta - lr * step_grad(theta, idx)
    return theta0 - theta


def client_update(model: FlatClassifier, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, count: torch.Tensor,
                  noise: torch.Tensor, lr: float, prox_mu: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """One client, all models: ``(deltas [m, P], losses [m])`` for ``thetas [m, P]``, ``noise [m, steps, B]``."""
    losses = vmap(lambda t: masked_loss(model, t, x, y, count))(thetas)
    deltas = vmap(lambda t, u: _local_sgd(model, t, x, y, count, u, lr, prox_mu))(thetas, noise)
    return deltas, losses


def all_clients_update(model: FlatClassifier, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, count: torch.Tensor,
                       noise: torch.Tensor, lr: float, prox_mu: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Every client at once: ``(deltas [m, n, P], losses [m, n])``; ``x [n, S, d]``, ``noise [n, m, steps, B]``."""
    per_client = vmap(lambda xi, yi, ci, ui: client_update(model, thetas, xi, yi, ci, ui, lr, prox_mu))
    deltas, losses = per_client(x, y, count, noise)
    # Contiguous [m, n, ...] like the Flower engine, so server-side reductions round identically.
    return deltas.transpose(0, 1).contiguous(), losses.T.contiguous()


def evaluate(model: FlatClassifier, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(accuracy [m, n], loss [m, n])`` of every model on every client's split."""
    def one(theta):
        acc = vmap(lambda xi, yi, ci: masked_accuracy(model, theta, xi, yi, ci))(x, y, count)
        loss = vmap(lambda xi, yi, ci: masked_loss(model, theta, xi, yi, ci))(x, y, count)
        return acc, loss

    return vmap(one)(thetas)
