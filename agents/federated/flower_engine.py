"""Flower engine: the same rounds as the in-process engine, with clients as Flower ClientApps.

The server loop (:class:`morl.agents.federated.simulator.Federation`) runs inside a Flower
``ServerApp`` main function; each round it sends every node one message carrying the m global
models (one ``ArrayRecord``) and the round index, and each ``ClientApp`` answers with its
``deltas [m, P]`` and ``losses [m]`` from :func:`morl.agents.federated.client.client_update` — the
function the in-process engine vmaps over clients — drawing its minibatches from the same
:func:`morl.agents.federated.client.round_noise`. With the same seed both engines give the same models
(up to float rounding of batched vs per-client kernels).

This module imports ``flwr`` (optional extra ``morl[fl]``); import it only when the Flower
engine is chosen. :func:`run` uses Flower's Simulation Runtime (Ray, one virtual SuperNode per
client). For real deployments, :func:`make_apps` returns the ServerApp/ClientApp pair to
serve with ``flwr run`` / SuperLink + SuperNodes; every node then needs the data partition
named by its ``partition-id`` node config.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from morl.agents.federated import client as fl_client
from morl.agents.federated.model import FlatClassifier
from morl.agents.federated.simulator import FederatedData, Federation, LocalConfig

MESSAGE_TYPE = "train"


def _client_reply(
    model: FlatClassifier, data: FederatedData, local: LocalConfig, seed: int, msg: Message, context: Context
) -> Message:
    pid = int(context.node_config["partition-id"])
    cfg = msg.content["config"]
    round_idx = int(cfg["round"])
    thetas = torch.from_numpy(msg.content["models"].to_numpy_ndarrays()[0].copy())
    m = int(cfg["num-models"])
    # The whole round's noise is a function of (seed, round); this client takes its own row and,
    # under pair sampling, the rows of the models it was sent.
    noise = fl_client.round_noise(seed, round_idx, data.num_clients, m, local.steps, local.batch_size)[pid]
    noise = noise[torch.tensor(list(cfg["model-idx"]), dtype=torch.long)]
    tr = data.train
    deltas, losses = fl_client.client_update(
        model,
        thetas,
        tr.x[pid],
        tr.y[pid],
        tr.count[pid],
        noise,
        local.lr_at(round_idx),
        local.prox_mu,
        local.loss_source,
    )
    content = RecordDict(
        {
            "result": ArrayRecord([deltas.numpy(), losses.numpy()]),
            "meta": ConfigRecord({"partition-id": pid}),
        }
    )
    return Message(content, reply_to=msg)


class FlowerEngine:
    """``client_work`` over a Flower ``Grid``; valid while the ServerApp main function runs."""

    name = "flower"

    def __init__(self, num_clients: int, timeout: float = 600.0) -> None:
        self.num_clients, self.timeout = num_clients, timeout
        self.grid: Grid | None = None
        self.node_ids: list[int] = []
        self.partition_of: dict[int, int] = {}  # node id -> partition id, from the replies

    def attach(self, grid: Grid, wait_s: float = 120.0) -> None:
        # Virtual nodes register asynchronously: wait until all of them are there.
        start = time.monotonic()
        while True:
            ids = sorted(grid.get_node_ids())
            if len(ids) >= self.num_clients or time.monotonic() - start > wait_s:
                break
            time.sleep(0.2)
        if len(ids) < self.num_clients:
            raise RuntimeError(f"only {len(ids)} of {self.num_clients} Flower nodes registered within {wait_s:.0f} s")
        self.grid, self.node_ids = grid, ids

    def client_work(
        self, round_idx: int, thetas: torch.Tensor, pairs: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """As the in-process engine: with a mask ``pairs [m, n]`` each node gets only the models
        sampled for it (nodes with none get no message) and the other pairs come back as zeros."""
        if self.grid is None:
            raise RuntimeError(
                "FlowerEngine is not attached to a Flower grid (use morl.agents.federated.flower_engine.run)"
            )
        m, n = thetas.shape[0], self.num_clients
        host = thetas.detach().cpu()
        if pairs is None or len(self.partition_of) < n:
            # Every pair (the strategy keeps only the sampled ones). Which node holds which
            # partition is learnt from the replies, so the first round always goes to all.
            wanted = {node: list(range(m)) for node in self.node_ids}
        else:
            wanted = {node: pairs[:, self.partition_of[node]].nonzero().flatten().tolist() for node in self.node_ids}
        messages = []
        for node in self.node_ids:
            if not wanted[node]:
                continue
            content = RecordDict(
                {
                    "models": ArrayRecord([host[wanted[node]].numpy()]),
                    "config": ConfigRecord({"round": round_idx, "num-models": m, "model-idx": wanted[node]}),
                }
            )
            messages.append(self.grid.create_message(content, MESSAGE_TYPE, node, str(round_idx)))
        replies = list(self.grid.send_and_receive(messages, timeout=self.timeout))
        errors = [r.error for r in replies if r.has_error()]
        if errors or len(replies) != len(messages):
            raise RuntimeError(
                f"Flower round {round_idx}: {len(replies)}/{len(messages)} replies; errors: {errors[:3]}"
            )
        deltas = np.zeros((m, n, host.shape[1]), dtype=host.numpy().dtype)
        losses = np.zeros((m, n), dtype=deltas.dtype)
        seen = set()
        for r in replies:
            pid, node = int(r.content["meta"]["partition-id"]), r.metadata.src_node_id
            self.partition_of[node] = pid
            d, l = r.content["result"].to_numpy_ndarrays()
            deltas[wanted[node], pid], losses[wanted[node], pid] = d, l
            seen.add(pid)
        if len(seen) != len(messages):
            raise RuntimeError(f"Flower round {round_idx}: duplicate or missing partition ids in the replies")
        dev = thetas.device
        return (torch.from_numpy(deltas).to(dev, thetas.dtype), torch.from_numpy(losses).to(dev, thetas.dtype))

    def close(self) -> None:
        self.grid = None


def make_apps(
    federation: Federation, local: LocalConfig, seed: int, rounds: int, on_round: Callable[[int], None] | None = None
) -> tuple[ServerApp, ClientApp, FlowerEngine]:
    """The Flower ``ServerApp`` (runs ``rounds`` rounds of ``federation``) and ``ClientApp``."""
    model, data = federation.model, federation.data.to("cpu")
    engine = FlowerEngine(data.num_clients)
    server_app, client_app = ServerApp(), ClientApp()

    @server_app.main()
    def _main(grid: Grid, context: Context) -> None:
        engine.attach(grid)
        try:
            while federation.round < rounds:
                federation.run_round(engine)
                if on_round is not None:
                    on_round(federation.round)
        finally:
            engine.close()

    @client_app.train()
    def _train(msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        return _client_reply(model, data, local, seed, msg, context)

    return server_app, client_app, engine


def run(
    federation: Federation,
    local: LocalConfig,
    seed: int,
    rounds: int,
    on_round: Callable[[int], None] | None = None,
    num_cpus: int | None = None,
    cpus_per_client: float = 1.0,
) -> None:
    """Run ``federation`` for ``rounds`` rounds in Flower's Simulation Runtime (Ray)."""
    import os

    from flwr.simulation import run_simulation

    server_app, client_app, _ = make_apps(federation, local, seed, rounds, on_round)
    init_args = {"num_cpus": int(num_cpus or os.cpu_count() or 1), "include_dashboard": False, "log_to_driver": False}
    run_simulation(
        server_app,
        client_app,
        num_supernodes=federation.data.num_clients,
        backend_config={"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0}, "init_args": init_args},
    )
