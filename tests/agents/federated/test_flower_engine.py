"""The Flower engine (real ServerApp/ClientApp in Flower's Simulation Runtime) reproduces the
in-process engine round for round."""

from contextlib import contextmanager

import pytest
import ray  # noqa: F401  Flower's simulation backend: missing, it fails the run instead of skipping it
import torch

from morl.agents.federated import strategies as S
from morl.agents.federated.model import build as build_model
from morl.agents.federated.simulator import Federation, InProcessEngine, LocalConfig
from morl.envs.data import federated as fl_data
from morl.most import MosT

pytestmark = pytest.mark.integration  # Flower's Simulation Runtime on Ray


@contextmanager
def _one_thread():
    # One thread everywhere (the ClientApps use one), so every reduction rounds identically:
    # exact OT can turn a last-bit difference in the losses into a different vertex.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _federation(data, model):
    strategy = S.MosTStrategy(MosT(3, gamma_scale="code", update="code"), warmup_rounds=1)
    return Federation(model, data, strategy, num_models=3, seed=0)


def test_flower_simulation_matches_in_process_engine():
    from morl.agents.federated import flower_engine

    data = fl_data.synthetic(0.5, 0.5, num_clients=6, samples_per_client=40, seed=0)
    model = build_model("logreg", data.dim, data.num_classes)
    local = LocalConfig(lr=0.05, steps=3, batch_size=8)
    ref = _federation(data, model)
    engine = InProcessEngine(model, ref.data, local, seed=0)
    with _one_thread():
        for _ in range(3):
            ref.run_round(engine)
        fed = _federation(data, model)
        seen = []
        flower_engine.run(fed, local, seed=0, rounds=3, on_round=seen.append, num_cpus=2)
    assert seen == [1, 2, 3] and fed.round == 3
    torch.testing.assert_close(fed.thetas, ref.thetas, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fed.strategy.most.gamma, ref.strategy.most.gamma, atol=1e-6, rtol=1e-5)
    assert float((fed.thetas - _federation(data, model).thetas).abs().max()) > 1e-3  # it trained


def test_flower_official_round_matches_in_process_engine():
    # Pair sampling (each node is sent only its sampled models), last-epoch losses, the cumulative
    # Γ average, the OT re-solve and the switch: the same models through Flower as in process.
    from morl.agents.federated import flower_engine

    data = fl_data.synthetic(0.5, 0.5, num_clients=6, samples_per_client=40, seed=0)
    model = build_model("logreg", data.dim, data.num_classes)
    local = LocalConfig(lr=0.05, steps=3, batch_size=8, loss_source="last_epoch")

    def federation():
        most = MosT(3, gamma_scale="code", update="code")
        strategy = S.MosTStrategy(
            most,
            warmup_rounds=1,
            combine="switch",
            sample_fraction=0.3,
            gamma_average="cumulative",
            gamma_average_start=2,
            ot_resolve=1,
            seed=0,
        )
        return Federation(model, data, strategy, num_models=3, seed=0)

    ref = federation()
    engine = InProcessEngine(model, ref.data, local, seed=0)
    with _one_thread():
        for _ in range(5):
            ref.run_round(engine)
        fed = federation()
        flower_engine.run(fed, local, seed=0, rounds=5, num_cpus=2)
    assert fed.strategy.branches == ref.strategy.branches and len(ref.strategy.branches) == 4
    torch.testing.assert_close(fed.thetas, ref.thetas, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fed.strategy.cache_losses, ref.strategy.cache_losses, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fed.strategy.gamma_avg, ref.strategy.gamma_avg, atol=1e-6, rtol=1e-5)
