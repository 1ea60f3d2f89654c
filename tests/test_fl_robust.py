"""Server-side robust aggregation in the in-process FL simulation: one Byzantine client sending
huge updates derails FedAvg but not Krum or the trimmed mean (strategies ``krum`` and
``trimmed_mean``, morl's aggregators over each model's client deltas)."""

import pytest
import torch

from morl.agents.federated import strategies as S
from morl.agents.federated.model import build as build_model
from morl.agents.federated.simulator import Federation, InProcessEngine, LocalConfig
from morl.envs.data import federated as fl_data
from morl.runners.fl.build import build_strategy
from morl.runners.fl.config import FLConfig
from morl.runners.errors import UserError


class Byzantine:
    """An engine whose client 0 replaces its deltas by N(0, 1e6²) noise every round."""

    def __init__(self, engine, seed):
        self.engine, self.gen = engine, torch.Generator().manual_seed(seed)

    def client_work(self, round_idx, thetas):
        deltas, losses = self.engine.client_work(round_idx, thetas)
        deltas = deltas.clone()
        deltas[:, 0] = 1e6 * torch.randn(deltas[:, 0].shape, generator=self.gen, dtype=deltas.dtype)
        return deltas, losses


def _train(strategy, byzantine, rounds=15):
    data = fl_data.synthetic(0.5, 0.5, num_clients=8, samples_per_client=60, iid=True, seed=0)
    model = build_model("logreg", data.dim, data.num_classes)
    fed = Federation(model, data, strategy, num_models=2, seed=0)
    engine = InProcessEngine(model, fed.data, LocalConfig(lr=0.05, steps=5, batch_size=10), seed=0)
    engine = Byzantine(engine, 1) if byzantine else engine
    for _ in range(rounds):
        fed.run_round(engine)
    return fed.thetas, float(fed.evaluate()["test_mean"])


def test_a_byzantine_client_does_not_derail_krum_or_the_trimmed_mean():
    """Measured (seed 0, 15 rounds, 8 iid clients, 2 models): honest FedAvg ‖θ‖ ≈ 2.4 and picked
    test accuracy 0.48; with the Byzantine client FedAvg's ‖θ‖ reaches 1.2e7 and accuracy 0.14
    (chance is 0.1), while Krum (f = 1) and the trimmed mean (trim = 1) keep ‖θ‖ ≈ 2.5 and
    accuracy 0.48. Bounds: ‖θ‖ < 100 and accuracy ≥ 0.8 × honest FedAvg; FedAvg's ‖θ‖ > 1e3."""
    _, honest = _train(S.FedAvg(), byzantine=False)
    thetas, _ = _train(S.FedAvg(), byzantine=True)
    assert thetas.norm(dim=1).min() > 1e3
    for name in ("krum", "trimmed_mean"):
        thetas, acc = _train(S.Robust(name, 1, 8), byzantine=True)
        assert thetas.norm(dim=1).max() < 100 and acc >= 0.8 * honest, (name, acc, honest)


def test_robust_strategy_is_the_aggregator_per_model(gen):
    deltas = torch.randn(3, 7, 5, generator=gen, dtype=torch.float64)
    from morl.aggregators import build

    upd = S.Robust("trimmed_mean", 2, 7).aggregate(deltas, None, torch.ones(7))
    torch.testing.assert_close(upd, torch.stack([build("trimmed_mean", trim=2)(d) for d in deltas]))
    upd = S.Robust("krum", 2, 7).aggregate(deltas, None, torch.ones(7))
    torch.testing.assert_close(upd, torch.stack([build("krum", n_byzantine=2)(d) for d in deltas]))


def test_config_wiring_and_validation():
    cfg = FLConfig()
    cfg.strategy.name, cfg.strategy.n_byzantine = "krum", 2
    assert isinstance(build_strategy(cfg, 7), S.Robust)
    with pytest.raises(ValueError, match="krum with n_byzantine=2 needs at least 7 clients, got 6"):
        build_strategy(cfg, 6)
    cfg.strategy.name = "trimmed_mean"
    assert build_strategy(cfg, 5).aggregator.trim == 2
    with pytest.raises(ValueError, match="needs at least 5 clients"):
        build_strategy(cfg, 4)
