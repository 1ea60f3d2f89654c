"""A tiny federated problem shared by the client-update tests: 4 clients, 3 logistic models, one round's noise."""

import torch

from morl.agents.federated import client as C
from morl.agents.federated.model import build as build_model
from morl.envs.data import federated as fl_data


def tiny_round():
    """``(model, thetas [3, P], train split, noise)`` for round 0 of a 4-client Syn(0.5, 0.5) problem."""
    data = fl_data.synthetic(0.5, 0.5, num_clients=4, samples_per_client=30, seed=0)
    model = build_model("logreg", data.dim, data.num_classes)
    thetas = model.init(3, torch.Generator().manual_seed(0))
    noise = C.round_noise(0, 0, 4, 3, steps=3, batch=5)
    return model, thetas, data.train, noise


def uneven_round(steps: int = 6, batch: int = 5):
    """``(model, thetas [3, P], data, noise)``: 4 clients with unequal train counts ``[18, 5, 11, 2]``.

    The rows past each count stay in ``x`` as padding that every computation must ignore;
    unequal counts make a size-weighted average differ from a plain one.
    """
    data = fl_data.synthetic(0.5, 0.5, num_clients=4, samples_per_client=30, seed=0)
    data.train.count = torch.tensor([18, 5, 11, 2])
    model = build_model("logreg", data.dim, data.num_classes)
    thetas = model.init(3, torch.Generator().manual_seed(0))
    noise = C.round_noise(0, 0, 4, 3, steps=steps, batch=batch)
    return model, thetas, data, noise


def run_fl(cfg) -> dict:
    """Run ``cfg`` as ``morl fl`` does (the experiment shell) in a temporary run directory and
    return its ``final_metrics.json`` (``final``: the last evaluation, ``best_val``, ``rounds``)."""
    import json
    import tempfile
    from pathlib import Path

    from morl.runners.shell.commands import start

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = start("fl", cfg, run_dir=Path(tmp) / "run", progress=False)
        return json.loads((run_dir / "final_metrics.json").read_text())


def spy_federation(monkeypatch):
    """Record the federation after each round it runs: ``seen["fed"]`` for the returned ``seen``."""
    from morl.agents.federated import simulator

    seen = {}
    orig = simulator.Federation.run_round

    def run_round(self, engine):
        orig(self, engine)
        seen["fed"] = self

    monkeypatch.setattr(simulator.Federation, "run_round", run_round)
    return seen
