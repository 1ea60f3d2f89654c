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
from torch.func import grad_and_value, vmap

from morl.agents.federated.model import FlatClassifier


def masked_loss(
    model: FlatClassifier, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, count: torch.Tensor
) -> torch.Tensor:
    """Mean cross-entropy over the first ``count`` rows of ``x`` (the rest is padding)."""
    logits = model.logits(theta, x)
    nll = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    valid = (torch.arange(x.shape[0], device=x.device) < count).to(nll.dtype)
    return (nll * valid).sum() / count.clamp_min(1).to(nll.dtype)


def masked_accuracy(
    model: FlatClassifier, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, count: torch.Tensor
) -> torch.Tensor:
    pred = model.logits(theta, x).argmax(-1)
    valid = (torch.arange(x.shape[0], device=x.device) < count).to(torch.float32)
    return ((pred == y).to(torch.float32) * valid).sum() / count.clamp_min(1).to(torch.float32)


def round_noise(
    seed: int,
    round_idx: int,
    num_clients: int,
    num_models: int,
    steps: int,
    batch: int,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Uniforms ``[n, m, steps, batch]`` picking the local minibatches of round ``round_idx``."""
    gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(round_idx))
    return torch.rand(num_clients, num_models, steps, batch, generator=gen).to(device)


LOSS_SOURCES = ("start", "last_epoch")


def _local_sgd(
    model: FlatClassifier, theta0: torch.Tensor, x, y, count, noise: torch.Tensor, lr: float, prox_mu: float
):
    # One (model, client) pair: `steps` minibatch SGD steps, batch indices drawn from `noise`.
    # Returns the pseudo-gradient and the minibatch loss before each step ([steps]).
    def batch_loss(theta, idx):
        xb, yb = x[idx], y[idx]
        logits = model.logits(theta, xb)
        loss = torch.nn.functional.cross_entropy(logits, yb)
        # FedProx's proximal term (μ/2)‖θ − θ_global‖² (zero for every other strategy).
        return loss + 0.5 * prox_mu * ((theta - theta0) ** 2).sum()

    step = grad_and_value(batch_loss)
    theta = theta0
    step_losses = []
    for s in range(noise.shape[0]):
        idx = (noise[s] * count.to(noise.dtype)).long().clamp_max(x.shape[0] - 1)
        g, value = step(theta, idx)
        theta = theta - lr * g
        step_losses.append(value)
    return theta0 - theta, torch.stack(step_losses)


def last_epoch_mean(step_losses: torch.Tensor, count: torch.Tensor, batch: int) -> torch.Tensor:
    """Mean of the minibatch losses of the last local epoch: the last ``⌈count/batch⌉`` steps.

    The official MosT code's OT cost (tianyi-lab/MosT ``federated_moo.py``: ``L_ij`` = mean minibatch
    training loss in the last local epoch, taken along the local trajectory). ``step_losses [..., steps]``.
    """
    steps = step_losses.shape[-1]
    per_epoch = ((count + batch - 1) // batch).clamp(1, steps).to(step_losses.dtype)
    pos = torch.arange(steps, device=step_losses.device).to(step_losses.dtype)
    window = (pos >= steps - per_epoch).to(step_losses.dtype)
    return (step_losses * window).sum(-1) / per_epoch


def _pair_update(
    model: FlatClassifier, theta: torch.Tensor, x, y, count, noise, lr: float, prox_mu: float, loss_source: str
):
    # One (model, client) pair: (Δ [P], loss) with the loss per `loss_source`.
    delta, step_losses = _local_sgd(model, theta, x, y, count, noise, lr, prox_mu)
    if loss_source == "last_epoch":
        return delta, last_epoch_mean(step_losses, count, noise.shape[-1])
    return delta, masked_loss(model, theta, x, y, count)


def _check_source(loss_source: str) -> None:
    if loss_source not in LOSS_SOURCES:
        raise ValueError(f"loss_source={loss_source!r} is not valid; allowed: {', '.join(LOSS_SOURCES)}")


def client_update(
    model: FlatClassifier,
    thetas: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    count: torch.Tensor,
    noise: torch.Tensor,
    lr: float,
    prox_mu: float = 0.0,
    loss_source: str = "start",
) -> tuple[torch.Tensor, torch.Tensor]:
    """One client, all models: ``(deltas [m, P], losses [m])`` for ``thetas [m, P]``, ``noise [m, steps, B]``.

    ``loss_source="start"``: the full local training loss at the received model ``L_i(θ_j)``;
    ``"last_epoch"``: the mean minibatch loss of the last local epoch (the official code's).
    """
    _check_source(loss_source)
    return vmap(lambda t, u: _pair_update(model, t, x, y, count, u, lr, prox_mu, loss_source))(thetas, noise)


def all_clients_update(
    model: FlatClassifier,
    thetas: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    count: torch.Tensor,
    noise: torch.Tensor,
    lr: float,
    prox_mu: float = 0.0,
    loss_source: str = "start",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every client at once: ``(deltas [m, n, P], losses [m, n])``; ``x [n, S, d]``, ``noise [n, m, steps, B]``."""
    per_client = vmap(lambda xi, yi, ci, ui: client_update(model, thetas, xi, yi, ci, ui, lr, prox_mu, loss_source))
    deltas, losses = per_client(x, y, count, noise)
    # Contiguous [m, n, ...] like the Flower engine, so server-side reductions round identically.
    return deltas.transpose(0, 1).contiguous(), losses.T.contiguous()


def pairs_update(
    model: FlatClassifier,
    thetas: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    count: torch.Tensor,
    noise: torch.Tensor,
    lr: float,
    prox_mu: float,
    loss_source: str,
    model_idx: torch.Tensor,
    client_idx: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Only the sampled (model, client) pairs, as one vmap over the ``k`` pairs.

    Returns dense ``(deltas [m, n, P], losses [m, n])`` with zeros at the pairs not sampled;
    ``model_idx``, ``client_idx``: ``[k]`` on the data's device (the pair sampling of the MosT authors'
    code, ``federated_moo.py`` ``--frac``).
    """
    _check_source(loss_source)
    m, n = thetas.shape[0], x.shape[0]
    one = lambda t, xi, yi, ci, ui: _pair_update(model, t, xi, yi, ci, ui, lr, prox_mu, loss_source)  # noqa: E731
    d, l = vmap(one)(thetas[model_idx], x[client_idx], y[client_idx], count[client_idx], noise[client_idx, model_idx])
    flat = model_idx * n + client_idx
    deltas = torch.zeros(m * n, thetas.shape[1], dtype=d.dtype, device=d.device).index_copy(0, flat, d)
    losses = torch.zeros(m * n, dtype=l.dtype, device=l.device).index_copy(0, flat, l)
    return deltas.view(m, n, -1), losses.view(m, n)


def evaluate(
    model: FlatClassifier, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, count: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(accuracy [m, n], loss [m, n])`` of every model on every client's split."""

    def one(theta):
        acc = vmap(lambda xi, yi, ci: masked_accuracy(model, theta, xi, yi, ci))(x, y, count)
        loss = vmap(lambda xi, yi, ci: masked_loss(model, theta, xi, yi, ci))(x, y, count)
        return acc, loss

    return vmap(one)(thetas)
