"""Federated learning: data generators, strategies, MosT vs FedAvg, CLI (client and server maths: test_fl_math.py)."""

import numpy as np
import pytest
import torch

from morl.agents.federated import strategies as S
from morl.envs.data import federated as fl_data
from fl_fixtures import run_fl
from morl.runners.cli import main as morl
from morl.runners.fl.config import FLConfig


def test_synthetic_generator_shapes_and_heterogeneity():
    data = fl_data.synthetic(0.5, 0.5, num_clients=30, samples_per_client=100, seed=0)
    assert data.num_clients == 30 and data.dim == 60 and data.num_classes == 10
    assert data.train.count.tolist() == [60] * 30 and data.val.count.tolist() == [20] * 30
    assert data.test.count.tolist() == [20] * 30
    # Same seed, same data; heterogeneous clients have different label distributions.
    again = fl_data.synthetic(0.5, 0.5, num_clients=30, samples_per_client=100, seed=0)
    torch.testing.assert_close(data.train.x, again.train.x)
    hist = torch.stack([torch.bincount(data.train.y[k], minlength=10) for k in range(30)]).double()
    assert float(hist.std(0).mean()) > 3.0
    iid = fl_data.synthetic(0.0, 0.0, num_clients=5, iid=True, seed=0)
    assert iid.name == "synthetic_iid"
    lognormal = fl_data.synthetic(1.0, 1.0, num_clients=10, samples_per_client=None, seed=1)
    total = lognormal.train.count + lognormal.val.count + lognormal.test.count
    assert bool((total >= 50).all())


def test_synthetic_labels_follow_the_client_model():
    # y = argmax(x W_k + b_k): a per-client logistic regression fits its own train data well.
    data = fl_data.synthetic(1.0, 1.0, num_clients=10, samples_per_client=400, seed=3)
    from sklearn.linear_model import LogisticRegression

    # Synthetic(1, 1)'s label skew is strong: a client can get a single class (with 3 clients,
    # MORL_TEST_SEED_OFFSET=2 drew three), which its model trivially explains and no classifier
    # can fit. Of 10 clients, 4-10 had several classes over seeds 3-22.
    fitted = 0
    for k in range(10):
        n = int(data.train.count[k])
        x, y = data.train.x[k, :n].numpy(), data.train.y[k, :n].numpy()
        if len(np.unique(y)) == 1:
            continue
        clf = LogisticRegression(max_iter=2000, C=100.0).fit(x, y)
        assert clf.score(x, y) > 0.9
        fitted += 1
    assert fitted >= 3


def test_dirichlet_split_covers_everything_once():
    labels = np.repeat(np.arange(10), 50)
    parts = fl_data.dirichlet_split(labels, 8, alpha=0.3, min_size=10, seed=0)
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(500))
    assert min(len(p) for p in parts) >= 10
    digits = fl_data.digits(num_clients=5, alpha=0.5, seed=0)
    assert digits.num_clients == 5 and digits.dim == 64
    with pytest.raises(ValueError, match="alpha"):
        fl_data.dirichlet_split(labels, 4, alpha=0.0)


def test_fedavg_and_fedmgda_aggregation(gen):
    deltas = torch.randn(2, 5, 7, generator=gen, dtype=torch.float64)
    sizes = torch.tensor([1, 1, 2, 2, 4])
    upd = S.FedAvg().aggregate(deltas, None, sizes)
    torch.testing.assert_close(upd[0], (sizes.double() / 10) @ deltas[0])
    # ε = 0 pins FedMGDA+ to uniform weights; a large ε lets it reach the min-norm point.
    torch.testing.assert_close(S.FedMGDA(0.0).aggregate(deltas, None, sizes), deltas.mean(1), atol=1e-9, rtol=0)
    lam = S.box_simplex_min_norm(torch.eye(3, dtype=torch.float64) * torch.tensor([1.0, 4.0, 4.0], dtype=torch.float64), 0.0, 1.0, iters=2000)
    torch.testing.assert_close(lam, torch.tensor([2 / 3, 1 / 6, 1 / 6], dtype=torch.float64), atol=1e-6, rtol=0)


def _cfg(strategy, rounds=15, **most):
    cfg = FLConfig(device="cpu")
    cfg.strategy.name = strategy
    for k, v in most.items():
        setattr(cfg.strategy.most, k, v)
    cfg.train.rounds, cfg.train.eval_every, cfg.train.local_steps = rounds, rounds, 6
    return cfg


def test_most_beats_fedavg_on_synthetic():
    # Syn(0.5, 0.5), 30 clients, m = 5, val-picked test accuracy (MosT Table 1's protocol).
    fedavg = run_fl(_cfg("fedavg"))["final"]
    most = run_fl(_cfg("most", combine="linear"))["final"]
    assert most["test_mean"] > fedavg["test_mean"] + 0.01
    assert most["test_worst20"] > fedavg["test_worst20"] + 0.02
    assert min(most["model_share"]) >= 2  # every model is some clients' best: no collapse


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fedprox", "fedmgda", "mgda", "linearization"])
def test_baselines_learn(strategy):
    res = run_fl(_cfg(strategy, rounds=10))["final"]
    assert res["test_mean"] > 0.6


def test_cli_writes_a_run_and_rejects_bad_config(tmp_path, capsys):
    args = ["configs/fl_synthetic_most.yaml", "train.rounds=2", "train.eval_every=1", "data.num_clients=5",
            "train.local_steps=2", "device=cpu", "strategy.most.warmup_rounds=1"]
    assert morl(["fl", *args, f"out_dir={tmp_path}", "--no-progress"]) == 0
    run_dir = next(tmp_path.iterdir())
    for name in ("config.yaml", "metrics.jsonl", "final_metrics.json", "run.json", "checkpoints/last.pt"):
        assert (run_dir / name).is_file()
    assert any((run_dir / "tb").iterdir())
    for bad, msg in [("strategy.most.tau=-1", "tau"), ("strategy.name=fedsgd", "allowed"), ("train.rounds=0", "rounds")]:
        capsys.readouterr()
        assert morl(["fl", *args, f"out_dir={tmp_path}/x", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("morl: error:") and "\n" not in err and msg in err
    assert not (tmp_path / "x").exists()  # nothing half-written


def test_most_switch_takes_both_branches_and_is_deterministic():
    # The official code's rule: MGDA when S = Σ Γ_ij L_ij drops below its EMA, else linear.
    def once():
        fed = {}
        orig = S.MosTStrategy.aggregate

        def spy(self, *a):
            fed["strategy"] = self
            return orig(self, *a)

        S.MosTStrategy.aggregate = spy
        try:
            cfg = _cfg("most", rounds=8, combine="switch", warmup_rounds=1)
            cfg.data.num_clients, cfg.train.local_steps = 10, 3
            res = run_fl(cfg)["final"]
        finally:
            S.MosTStrategy.aggregate = orig
        return res, fed["strategy"]

    res, strat = once()
    # Round 1 compares with avg_S = 0, so it is linear; falling losses then pass the test.
    assert strat.branches[0] == "linear" and "mgda" in strat.branches and len(strat.branches) == 7
    assert strat.avg_objective > 0 and strat.state_dict()["avg_objective"] == strat.avg_objective
    again, strat2 = once()
    assert strat2.branches == strat.branches and again == res
    fresh = S.MosTStrategy(strat.most, combine="switch")
    fresh.load_state_dict(strat.state_dict())
    assert fresh.avg_objective == strat.avg_objective
    with pytest.raises(ValueError, match="allowed: mgda, linear, switch"):
        S.MosTStrategy(strat.most, combine="avg")


def test_most_switch_rule_follows_the_running_average():
    from morl.most import MosT

    strat = S.MosTStrategy(MosT(2, gamma_scale="code", update="code", solver="ipot"), warmup_rounds=0, combine="switch")
    gen = torch.Generator().manual_seed(0)
    deltas = torch.randn(2, 4, 6, generator=gen, dtype=torch.float64)
    for scale in (1.0, 0.5, 2.0, 1.9):
        strat.aggregate(deltas, scale * torch.ones(2, 4, dtype=torch.float64), torch.ones(4))
    # S = scale · Σ Γ = scale · m; avg: 0 -> 2 -> 0.95·2 + 0.05·1 -> ...
    assert strat.branches == ["linear", "mgda", "linear", "linear"]
    expect = 2.0
    for s in (1.0, 4.0, 3.8):
        expect = 0.95 * expect + 0.05 * s
    assert abs(strat.avg_objective - expect) < 1e-9
