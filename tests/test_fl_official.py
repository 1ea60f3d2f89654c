"""The official MosT code's FL round (tianyi-lab/MosT ``federated_moo.py`` + ``update.py``; not in the
paper) as options of the MosT strategy:
pair sampling with stale deltas/losses, last-epoch losses, the Γ moving average, the OT re-solve."""

import re

import pytest
import torch

from morl.agents.federated import client as C
from morl.agents.federated import strategies as S
from morl.agents.federated.model import build as build_model
from morl.envs.data import federated as fl_data
from fl_fixtures import run_fl, tiny_round
from morl.most import MosT
from morl.runners.fl.config import FLConfig
from morl.runners.fl.experiment import FLExperiment
from morl.runners.cli import main as morl


def _most(m=2, warm_start=True):
    return MosT(m, gamma_scale="code", update="code", solver="ipot", warm_start=warm_start)


def _cfg(rounds=6, **most):
    cfg = FLConfig(device="cpu")
    cfg.strategy.name = "most"
    cfg.data.num_clients = 8
    cfg.strategy.num_models = 3
    cfg.strategy.most.warmup_rounds = 1
    for k, v in most.items():
        setattr(cfg.strategy.most, k, v)
    cfg.train.rounds, cfg.train.eval_every, cfg.train.local_steps = rounds, rounds, 3
    return cfg


def _spy_federation(monkeypatch):
    from morl.agents.federated import simulator

    seen = {}
    orig = simulator.Federation.run_round

    def run_round(self, engine):
        orig(self, engine)
        seen["fed"] = self

    monkeypatch.setattr(simulator.Federation, "run_round", run_round)
    return seen


def test_sample_fraction_one_is_the_plain_round(monkeypatch):
    seen = _spy_federation(monkeypatch)
    run_fl(_cfg(combine="mgda"))
    plain = seen["fed"].thetas.clone()
    res = run_fl(_cfg(combine="mgda", sample_fraction=1.0, gamma_momentum=0.0, ot_resolve=0))
    assert torch.equal(seen["fed"].thetas, plain)
    assert seen["fed"].strategy.sample_pairs(10, 3, 8) is None and seen["fed"].strategy.cache_deltas is None
    assert res["rounds"] == 6


def test_pair_sampling_mask_follows_the_code():
    strat = S.MosTStrategy(_most(5), warmup_rounds=3, sample_fraction=0.1, seed=4)
    # All pairs in the warm-up rounds and the first MosT round (the code samples when epoch > warmup).
    assert all(strat.sample_pairs(r, 5, 30) is None for r in range(4))
    a, b = strat.sample_pairs(4, 5, 30), strat.sample_pairs(5, 5, 30)
    assert a.shape == (5, 30) and int(a.sum()) == 15 and int(b.sum()) == 15  # max(⌊0.1·150⌋, 1)
    assert torch.equal(a, S.MosTStrategy(_most(5), sample_fraction=0.1, seed=4).sample_pairs(4, 5, 30))
    assert not torch.equal(a, b)
    assert int(S.MosTStrategy(_most(5), sample_fraction=0.001).sample_pairs(9, 5, 30).sum()) == 1


def test_unsampled_pairs_use_the_cached_stale_deltas_and_losses(gen):
    m, n, p = 2, 6, 5
    strat = S.MosTStrategy(_most(m, warm_start=False), warmup_rounds=0, combine="linear", sample_fraction=0.5)
    d1 = torch.randn(m, n, p, generator=gen, dtype=torch.float64)
    l1 = torch.rand(m, n, generator=gen, dtype=torch.float64) + 0.5
    strat.aggregate(d1, l1, torch.ones(n))  # a full round fills the cache
    fresh = torch.zeros(m, n, dtype=torch.bool)
    fresh[0, 1] = fresh[1, 4] = fresh[1, 0] = True
    # What the engine returns under sampling: results at the sampled pairs, zeros elsewhere.
    d2 = torch.randn(m, n, p, generator=gen, dtype=torch.float64) * fresh.unsqueeze(-1)
    l2 = (torch.rand(m, n, generator=gen, dtype=torch.float64) + 2.0) * fresh
    update = strat.aggregate(d2, l2, torch.ones(n), fresh=fresh)
    merged_d, merged_l = d1.clone(), l1.clone()
    for j, i in fresh.nonzero().tolist():
        merged_d[j, i], merged_l[j, i] = d2[j, i], l2[j, i]
    assert torch.equal(strat.cache_deltas, merged_d) and torch.equal(strat.cache_losses, merged_l)
    # The plan is solved on the merged losses and the step mixes the merged deltas.
    gamma = _most(m, warm_start=False).assign(merged_l)
    torch.testing.assert_close(strat.most.gamma, gamma, rtol=0, atol=0)
    w = gamma.T / gamma.sum(0).unsqueeze(-1)
    torch.testing.assert_close(update, torch.einsum("ji,jip->jp", w, merged_d))
    with pytest.raises(ValueError, match="every pair first"):
        S.MosTStrategy(_most(m), warmup_rounds=0, sample_fraction=0.5).aggregate(d2, l2, torch.ones(n), fresh=fresh)


def test_engine_trains_only_the_sampled_pairs():
    model, thetas, tr, noise = tiny_round()
    full_d, full_l = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, 0.1, 0.0, "last_epoch")
    mi, ci = torch.tensor([0, 2, 2, 1]), torch.tensor([3, 0, 1, 1])
    d, l = C.pairs_update(model, thetas, tr.x, tr.y, tr.count, noise, 0.1, 0.0, "last_epoch", mi, ci)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[mi, ci] = True
    torch.testing.assert_close(d[mask], full_d[mask], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(l[mask], full_l[mask], atol=1e-6, rtol=1e-5)
    assert bool((d[~mask] == 0).all()) and bool((l[~mask] == 0).all())


def test_last_epoch_loss_is_the_mean_minibatch_loss_of_the_last_epoch():
    data = fl_data.synthetic(0.5, 0.5, num_clients=1, samples_per_client=40, seed=1)  # 24 train samples
    model = build_model("logreg", data.dim, data.num_classes)
    thetas = model.init(2, torch.Generator().manual_seed(1))
    tr, steps, batch, lr = data.train, 7, 10, 0.1
    noise = C.round_noise(0, 0, 1, 2, steps, batch)[0]
    deltas, losses = C.client_update(model, thetas, tr.x[0], tr.y[0], tr.count[0], noise, lr, loss_source="last_epoch")
    count = int(tr.count[0])
    for j in range(2):  # by hand: plain SGD, record each minibatch loss before its step
        theta, rec = thetas[j].clone().requires_grad_(True), []
        for s in range(steps):
            idx = (noise[j, s] * count).long().clamp_max(tr.x.shape[1] - 1)
            loss = torch.nn.functional.cross_entropy(model.logits(theta, tr.x[0, idx]), tr.y[0, idx])
            (g,) = torch.autograd.grad(loss, theta)
            rec.append(loss.item())
            theta = (theta - lr * g).detach().requires_grad_(True)
        per_epoch = -(-count // batch)  # ⌈24/10⌉ = 3 steps per local epoch
        assert abs(float(losses[j]) - sum(rec[-per_epoch:]) / per_epoch) < 1e-5
        torch.testing.assert_close(deltas[j], thetas[j] - theta.detach(), atol=1e-6, rtol=1e-5)
    step_losses = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    assert float(C.last_epoch_mean(step_losses, torch.tensor(25), 10)) == 4.0  # last 3 steps
    assert float(C.last_epoch_mean(step_losses, torch.tensor(500), 10)) == 3.0  # capped at all 5
    with pytest.raises(ValueError, match="allowed: start, last_epoch"):
        C.client_update(model, thetas, tr.x[0], tr.y[0], tr.count[0], noise, lr, loss_source="end")


def test_gamma_moving_average_mixes_as_specified(gen):
    plans = [torch.rand(4, 2, generator=gen, dtype=torch.float64) for _ in range(4)]
    ema = S.MosTStrategy(_most(), gamma_momentum=0.75)
    out = [ema._average(p).clone() for p in plans]
    expect = plans[0]
    for k, p in enumerate(plans):
        expect = p if k == 0 else 0.75 * expect + 0.25 * p
        torch.testing.assert_close(out[k], expect, rtol=0, atol=1e-15)
    # The code's Moving_Average (ot_ma=1): the latest plan until the start-th update, then the
    # running mean of the plan held at that point and every later one.
    cum = S.MosTStrategy(_most(), gamma_average="cumulative", gamma_average_start=3)
    out = [cum._average(p).clone() for p in plans]
    assert torch.equal(out[0], plans[0]) and torch.equal(out[1], plans[1])
    torch.testing.assert_close(out[2], (plans[1] + plans[2]) / 2)
    torch.testing.assert_close(out[3], (plans[1] + plans[2] + plans[3]) / 3)
    off = S.MosTStrategy(_most())
    assert all(torch.equal(off._average(p), p) for p in plans)


def test_mgda_step_uses_the_averaged_plan(gen):
    m, n, p = 2, 6, 5
    strat = S.MosTStrategy(_most(m), warmup_rounds=0, combine="mgda", gamma_momentum=0.5)
    deltas = torch.randn(m, n, p, generator=gen, dtype=torch.float64)
    strat.aggregate(deltas, torch.rand(m, n, generator=gen, dtype=torch.float64) + 0.5, torch.ones(n))
    first = strat.most.gamma.clone()
    update = strat.aggregate(deltas, torch.rand(m, n, generator=gen, dtype=torch.float64) + 0.5, torch.ones(n))
    bar = 0.5 * first + 0.5 * strat.most.gamma
    torch.testing.assert_close(strat.gamma_avg, bar)
    torch.testing.assert_close(update, _most(m).directions(deltas, bar))


def test_ot_resolve_uses_predicted_losses_and_keeps_the_marginals(gen, monkeypatch):
    m, n, p = 3, 9, 4
    strat = S.MosTStrategy(_most(m), warmup_rounds=0, combine="mgda", ot_resolve=2)
    deltas = torch.randn(m, n, p, generator=gen, dtype=torch.float64)
    losses = torch.rand(m, n, generator=gen, dtype=torch.float64) + 0.5
    calls = []
    orig = MosT.assign

    def spy(self, l, marginals=None):
        plan = orig(self, l, marginals)
        calls.append((l.clone(), marginals, plan.clone()))
        return plan

    monkeypatch.setattr(MosT, "assign", spy)
    update = strat.aggregate(deltas, losses, torch.ones(n))
    assert len(calls) == 3 and strat.gamma_updates == 3
    first = _most(m).directions(deltas, calls[0][2])
    shift = torch.einsum("jip,jp->ji", deltas, first).amax(1) + 0.5 * first.norm(dim=1)
    torch.testing.assert_close(calls[1][0], losses + shift.unsqueeze(1))
    assert calls[1][1] is not None  # the round's marginals, not ones recomputed from the predicted losses
    # The last step uses the plan of the first re-solve; the second re-solve only feeds Γ̄.
    torch.testing.assert_close(update, _most(m).directions(deltas, calls[1][2]))
    # A constant shift per model leaves the exact OT optimum unchanged (Σ_ij Γ_ij c_j = Σ_j β_j c_j).
    cost = lambda g: float((g * losses.T).sum())  # noqa: E731
    assert abs(cost(calls[1][2]) - cost(calls[0][2])) < 1e-6 * cost(calls[0][2])


@pytest.mark.parametrize("bad, msg", [
    ("strategy.most.sample_fraction=0", "sample_fraction must be in \\(0, 1\\]"),
    ("strategy.most.sample_fraction=1.5", "sample_fraction must be in \\(0, 1\\]"),
    ("strategy.most.gamma_momentum=1.0", "gamma_momentum must be in \\[0, 1\\)"),
    ("strategy.most.gamma_momentum=-0.1", "gamma_momentum must be in \\[0, 1\\)"),
    ("strategy.most.ot_resolve=-1", "ot_resolve must be >= 0"),
    ("strategy.most.loss_source=end", "loss_source"),
])
def test_bad_values_give_one_line_errors(bad, msg, tmp_path, capsys):
    assert morl(["fl", "configs/fl_most_official.yaml", f"out_dir={tmp_path / 'runs'}", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("morl: error:") and "\n" not in err
    assert re.search(msg, err), err
    assert not (tmp_path / "runs").exists()  # no run directory


def test_bad_values_raise_in_the_library():
    for kwargs, msg in [({"sample_fraction": 0.0}, "sample_fraction"), ({"sample_fraction": 1.01}, "sample_fraction"),
                        ({"gamma_momentum": 1.0}, "gamma_momentum"), ({"gamma_momentum": -0.5}, "gamma_momentum"),
                        ({"gamma_average": "sma"}, "allowed: ema, cumulative"),
                        ({"gamma_average": "cumulative", "gamma_momentum": 0.5}, "gamma_average=ema only"),
                        ({"ot_resolve": -1}, "ot_resolve")]:
        with pytest.raises(ValueError, match=msg):
            S.MosTStrategy(_most(), **kwargs)


def test_official_round_runs_end_to_end(monkeypatch):
    seen = _spy_federation(monkeypatch)
    overrides = ["device=cpu", "train.rounds=8", "train.eval_every=8", "data.num_clients=10", "train.local_steps=3",
                 "strategy.most.warmup_rounds=1", "strategy.most.gamma_average_start=3", "strategy.most.sample_fraction=0.2"]
    cfg = FLExperiment.load_config("configs/fl_most_official.yaml", overrides)
    res = run_fl(cfg)["final"]
    strat = seen["fed"].strategy
    assert len(strat.branches) == 7 and strat.branches[0] == "linear"
    assert strat.gamma_count > 0 and strat.cache_deltas.shape == (5, 10, seen["fed"].thetas.shape[1])
    assert res["test_mean"] > 0.5
