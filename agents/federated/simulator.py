"""The federated training loop (server side), shared by both engines.

A round: the engine returns every client's pseudo-gradients and losses for the m global models
(``deltas [m, n, P]``, ``losses [m, n]``), the strategy turns them into one update per model, and
the server subtracts it. :class:`InProcessEngine` computes the client work in one vmapped call
(clients × models) on the data's device; :mod:`morl.agents.federated.flower_engine` does the same
through Flower messages. Evaluation: each client picks its best model on validation accuracy
and reports that model's test accuracy (MosT paper, §6.2).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import torch

from morl.agents.federated import client as fl_client
from morl.agents.federated.model import FlatClassifier
from morl.metrics.most_metrics import picked_accuracy, tail_means


class ClientSplit(Protocol):
    """One split of every client, padded: ``x [n, S, d]``, ``y [n, S]``, ``count [n]``."""

    x: torch.Tensor
    y: torch.Tensor
    count: torch.Tensor


class FederatedData(Protocol):
    """What a federation reads of its data; the runner hands it ``morl.envs.data.federated``'s
    data set; the learner depends on no data module."""

    train: ClientSplit
    val: ClientSplit
    test: ClientSplit
    num_classes: int

    @property
    def num_clients(self) -> int: ...

    def to(self, device) -> FederatedData: ...


@dataclass
class LocalConfig:
    """Client-side training: ``steps`` minibatch SGD steps of size ``batch_size`` per round."""

    lr: float = 0.05
    steps: int = 12
    batch_size: int = 20
    prox_mu: float = 0.0
    lr_decay: float = 1.0  #: lr multiplied by this every ``decay_every`` rounds
    decay_every: int = 10
    #: "start" (L_i(θ_j)) or "last_epoch" (the MosT authors' code, tianyi-lab/MosT ``federated_moo.py``)
    loss_source: str = "start"

    def lr_at(self, round_idx: int) -> float:
        return self.lr * self.lr_decay ** (round_idx // max(1, self.decay_every))


class InProcessEngine:
    """All clients' local updates as one batched tensor computation (CPU or GPU)."""

    name = "inprocess"

    def __init__(self, model: FlatClassifier, data: FederatedData, local: LocalConfig, seed: int) -> None:
        self.model, self.data, self.local, self.seed = model, data, local, seed

    def client_work(
        self, round_idx: int, thetas: torch.Tensor, pairs: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(deltas [m, n, P], losses [m, n])``; with a mask ``pairs [m, n]`` only those pairs
        are computed (one vmap over them) and the others are zero."""
        tr, local = self.data.train, self.local
        noise = fl_client.round_noise(
            self.seed, round_idx, self.data.num_clients, thetas.shape[0], local.steps, local.batch_size, thetas.device
        )
        if pairs is None:
            return fl_client.all_clients_update(
                self.model,
                thetas,
                tr.x,
                tr.y,
                tr.count,
                noise,
                local.lr_at(round_idx),
                local.prox_mu,
                local.loss_source,
            )
        # The mask is drawn on the host by the strategy, so its indices cost no device sync.
        model_idx, client_idx = (i.to(thetas.device) for i in pairs.cpu().nonzero(as_tuple=True))
        return fl_client.pairs_update(
            self.model,
            thetas,
            tr.x,
            tr.y,
            tr.count,
            noise,
            local.lr_at(round_idx),
            local.prox_mu,
            local.loss_source,
            model_idx,
            client_idx,
        )

    def close(self) -> None:
        pass


class Federation:
    """m global models trained by a strategy over the clients of ``data``.

    ``engine`` supplies ``client_work(round, thetas[, pairs]) -> (deltas [m, n, P], losses [m, n])``.
    A strategy with ``sample_pairs(round, m, n)`` (MosT with ``sample_fraction < 1``) picks the
    (model, client) pairs trained each round; the engine computes only those, and the strategy
    fills in the others from its cache of stale results.
    """

    def __init__(
        self,
        model: FlatClassifier,
        data: FederatedData,
        strategy,
        num_models: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        self.model, self.data, self.strategy = model, data.to(device), strategy
        gen = torch.Generator().manual_seed(seed)
        self.thetas = model.init(num_models, gen).to(device)
        self.round = 0
        self.seconds = {"client": 0.0, "server": 0.0}

    def run_round(self, engine) -> None:
        t0 = time.perf_counter()
        sampler = getattr(self.strategy, "sample_pairs", None)
        pairs = None if sampler is None else sampler(self.round, self.thetas.shape[0], self.data.num_clients)
        if pairs is None:
            deltas, losses = engine.client_work(self.round, self.thetas)
            t1 = time.perf_counter()
            update = self.strategy.aggregate(deltas, losses, self.data.train.count)
        else:
            deltas, losses = engine.client_work(self.round, self.thetas, pairs)
            t1 = time.perf_counter()
            update = self.strategy.aggregate(deltas, losses, self.data.train.count, fresh=pairs)
        self.thetas = self.thetas - update.to(self.thetas)
        self.round += 1
        t2 = time.perf_counter()
        self.seconds["client"] += t1 - t0
        self.seconds["server"] += t2 - t1

    def evaluate(self) -> dict[str, torch.Tensor]:
        """Per (model, client) accuracies and the val-picked / oracle test accuracy summaries."""
        out = {}
        for split in ("train", "val", "test"):
            s = getattr(self.data, split)
            acc, loss = fl_client.evaluate(self.model, self.thetas, s.x, s.y, s.count)
            out[f"{split}_acc"], out[f"{split}_loss"] = acc, loss
        picked = picked_accuracy(out["test_acc"], out["val_acc"])
        out["picked_test_acc"] = picked
        for k, v in tail_means(picked).items():
            out[f"test_{k}"] = v
        out["oracle_test_mean"] = picked_accuracy(out["test_acc"]).mean()
        out["model_share"] = torch.bincount(out["val_acc"].argmax(0), minlength=self.thetas.shape[0])
        return out

    def state_dict(self) -> dict:
        return {"thetas": self.thetas, "round": self.round, "strategy": self.strategy.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.thetas = state["thetas"].to(self.thetas)
        self.round = int(state["round"])
        self.strategy.load_state_dict(state["strategy"])
