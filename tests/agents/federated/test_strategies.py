"""Server strategies (FedAvg, FedProx, FedMGDA+, MGDA, linearization, robust, MosT with the official
code's round options) against direct computations, hand recursions and reference solvers."""

import io
import itertools

import numpy as np
import pytest
import quadprog
import torch

from morl.agents.federated import strategies as S
from morl.agents.federated.model import build as build_model
from morl.agents.federated.simulator import Federation, InProcessEngine, LocalConfig
from morl.envs.data import federated as fl_data
from morl.most import MosT
from morl.runners.fl.config import FLConfig
from tests.agents.federated.fl_fixtures import run_fl, spy_federation


def test_fedavg_and_fedmgda_aggregation(gen):
    deltas = torch.randn(2, 5, 7, generator=gen, dtype=torch.float64)
    sizes = torch.tensor([1, 1, 2, 2, 4])
    upd = S.FedAvg().aggregate(deltas, None, sizes)
    torch.testing.assert_close(upd[0], (sizes.double() / 10) @ deltas[0])
    # ε = 0 pins FedMGDA+ to uniform weights; a large ε lets it reach the min-norm point.
    torch.testing.assert_close(S.FedMGDA(0.0).aggregate(deltas, None, sizes), deltas.mean(1), atol=1e-9, rtol=0)
    lam = S.box_simplex_min_norm(
        torch.eye(3, dtype=torch.float64) * torch.tensor([1.0, 4.0, 4.0], dtype=torch.float64), 0.0, 1.0, iters=100
    )
    torch.testing.assert_close(lam, torch.tensor([2 / 3, 1 / 6, 1 / 6], dtype=torch.float64), atol=1e-6, rtol=0)


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


@pytest.mark.parametrize("eps", [-0.1, 1.5])
def test_fedmgda_eps_outside_the_unit_interval_is_refused(eps):
    with pytest.raises(ValueError, match="eps"):
        S.FedMGDA(eps=eps)


def test_fedmgda_default_box_half_width():
    # the documented default ε = 0.5 (an ε ≥ 1 would make the box the whole simplex: plain MGDA)
    assert S.FedMGDA().eps == 0.5


# -- plain MGDA and linearization ------------------------------------------------------------
# mgda: per model j, λ_j = argmin_{λ ∈ Δ_n} ‖Σ_i λ_i Δ_ji‖² on the raw client deltas; the reference
# solves the simplex QP exactly by enumerating supports (on a support S the minimiser of λᵀGλ with
# Σλ = 1 is G_S⁻¹1 / 1ᵀG_S⁻¹1; the best feasible candidate is the optimum). fedmgda (FedMGDA+,
# arXiv:2006.11489): the same over |λ_i − 1/n| ≤ ε on unit-normalised deltas, against quadprog.
def simplex_min_norm_exact(gram: torch.Tensor) -> torch.Tensor:
    n = gram.shape[0]
    best, best_val = None, float("inf")
    for r in range(1, n + 1):
        for support in itertools.combinations(range(n), r):
            idx = list(support)
            g = gram[idx][:, idx]
            try:
                x = torch.linalg.solve(g, torch.ones(r, dtype=gram.dtype))
            except RuntimeError:  # singular face: a smaller support covers it
                continue
            if x.sum() <= 0:
                continue
            lam = torch.zeros(n, dtype=gram.dtype)
            lam[idx] = x / x.sum()
            if (lam >= -1e-12).all() and (val := float(lam @ gram @ lam)) < best_val:
                best, best_val = lam.clamp_min(0), val
    return best


def test_mgda_update_is_the_exact_min_norm_point_per_model():
    # 3 models × 4 clients × 5 parameters; the deltas share a common component so the optimum
    # mixes interior and zero weights (checked below), not a vertex of the simplex.
    gen = torch.Generator().manual_seed(0)
    deltas = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64) + torch.tensor(
        [1.0, 0.5, 0, 0, 0], dtype=torch.float64
    )
    update = S.MGDA().aggregate(deltas, torch.zeros(3, 4, dtype=torch.float64), torch.ones(4))
    assert update.shape == (3, 5) and update.dtype == torch.float64
    supports = []
    for j in range(3):
        lam = simplex_min_norm_exact(deltas[j] @ deltas[j].T)
        supports.append(int((lam > 1e-9).sum()))
        torch.testing.assert_close(update[j], lam @ deltas[j], rtol=0, atol=1e-6)
    assert max(supports) > 1  # at least one model mixes several clients


def test_mgda_two_clients_closed_form():
    # n = 2: λ₁ = clip(((Δ₂ − Δ₁)·Δ₂) / ‖Δ₁ − Δ₂‖², 0, 1); one model interior, one clipped.
    d = torch.tensor(
        [
            [[1.0, 0.0], [0.0, 1.0]],  # orthogonal: λ = (½, ½)
            [[1.0, 0.0], [3.0, 1.0]],
        ],  # Δ₁ already the min-norm point: λ = (1, 0)
        dtype=torch.float64,
    )
    update = S.MGDA().aggregate(d, torch.zeros(2, 2, dtype=torch.float64), torch.ones(2))
    for j in range(2):
        a, b = d[j]
        lam1 = float(((b - a) @ b) / ((a - b) @ (a - b)))
        lam1 = min(max(lam1, 0.0), 1.0)
        torch.testing.assert_close(update[j], lam1 * a + (1 - lam1) * b, rtol=0, atol=1e-6)


def test_linearization_weights_are_fixed_convex_and_per_model():
    strat = S.Linearization(num_models=3, num_clients=5, seed=4)
    # Client i's delta is the basis vector e_i, so the update of model j IS its weight row.
    basis = torch.eye(5, dtype=torch.float64).expand(3, 5, 5)
    w = strat.aggregate(basis, torch.zeros(3, 5), torch.ones(5))
    assert w.dtype == torch.float64 and w.shape == (3, 5)
    assert (w > 0).all()
    # the weights are drawn in float32, so their sum is 1 to float32 rounding
    torch.testing.assert_close(w.sum(1), torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-6)
    assert not torch.allclose(w[0], w[1])  # each model its own mixture
    assert (w.max(1).values - w.min(1).values > 0.02).all()  # not the uniform FedAvg weights
    torch.testing.assert_close(strat.aggregate(basis, None, None), w, rtol=0, atol=0)  # fixed across rounds
    # the update is linear in the deltas with exactly those weights
    gen = torch.Generator().manual_seed(1)
    deltas = torch.randn(3, 5, 7, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(
        strat.aggregate(deltas, None, None), torch.einsum("ji,jip->jp", w, deltas), rtol=0, atol=1e-12
    )
    # same seed, same weights; another seed, other weights; sample counts play no part
    again = S.Linearization(num_models=3, num_clients=5, seed=4).aggregate(basis, None, torch.arange(1, 6))
    torch.testing.assert_close(again, w, rtol=0, atol=0)
    other = S.Linearization(num_models=3, num_clients=5, seed=5).aggregate(basis, None, None)
    assert not torch.allclose(other, w)


def _box_simplex_qp(gram: np.ndarray, lo: float, hi: float) -> np.ndarray:
    # quadprog: min ½xᵀGx − aᵀx s.t. Cᵀx ≥ b, the first meq rows equalities (Σλ = 1, λ ≥ lo, −λ ≥ −hi)
    n = gram.shape[0]
    constraints = np.hstack([np.ones((n, 1)), np.eye(n), -np.eye(n)])
    bounds = np.concatenate([[1.0], np.full(n, lo), np.full(n, -hi)])
    return quadprog.solve_qp(0.5 * (gram + gram.T), np.zeros(n), constraints, bounds, 1)[0]


@pytest.mark.parametrize(
    "n, eps",
    [
        (3, 0.05),
        (5, 0.2),
        (8, 1.0),
        pytest.param(3, 1.0, marks=pytest.mark.integration),
        pytest.param(8, 0.05, marks=pytest.mark.integration),
    ],
)
def test_fedmgda_weights_are_the_box_constrained_min_norm_point(n, eps):
    """8 models (one call) × n clients whose deltas share a component (so the box binds for
    small ε and a simplex face for large ε), norms differing. 300 projected-gradient steps
    give updates within 1e-6 of quadprog's (relative to the largest delta entry; measured ≤ 6.5e-8
    over 4 seeds of each (n, ε), 288 problems); the update is
    Σ λ_i Δ_i with the RAW deltas."""
    gen = torch.Generator().manual_seed(10 * n + int(100 * eps))
    m, p = 8, 20
    deltas = torch.randn(m, n, p, generator=gen, dtype=torch.float64) + 0.5 * torch.randn(
        m, 1, p, generator=gen, dtype=torch.float64
    )
    deltas = deltas * torch.rand(m, n, 1, generator=gen, dtype=torch.float64)
    lo, hi = max(0.0, 1.0 / n - eps), min(1.0, 1.0 / n + eps)
    update = S.FedMGDA(eps).aggregate(deltas, None, torch.ones(n))
    for j in range(m):
        unit = deltas[j] / deltas[j].norm(dim=-1, keepdim=True)
        lam = torch.from_numpy(_box_simplex_qp((unit @ unit.T).numpy(), lo, hi))
        assert (update[j] - lam @ deltas[j]).abs().max() <= 1e-6 * deltas[j].abs().max(), j


# -- MosT (L): the linear step with the paper's plan scaling ----------------------------------
# With gamma_scale="paper" Γ has total mass 1, so each model's column sums to about 1/m; the step
# is the Γ-weighted FedAvg with each model's weights normalised: Δθ_j = Σ_i Γ_ij Δ_ij / Σ_i Γ_ij.
def test_linear_step_normalises_each_models_plan_column():
    m, n, p = 2, 6, 5
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        deltas = torch.randn(m, n, p, generator=gen, dtype=torch.float64)
        losses = torch.rand(m, n, generator=gen, dtype=torch.float64) + 0.5
        strat = S.MosTStrategy(
            MosT(m, gamma_scale="paper", solver="ipot", warm_start=False), warmup_rounds=0, combine="linear"
        )
        update = strat.aggregate(deltas, losses, torch.ones(n))
        gamma = MosT(m, gamma_scale="paper", solver="ipot", warm_start=False).assign(losses)  # [n, m]
        assert abs(float(gamma.sum()) - 1) < 1e-9 and float(gamma.sum(0).max()) < 0.9  # columns far from 1
        expect = torch.stack([(gamma[:, j, None] * deltas[j]).sum(0) / gamma[:, j].sum() for j in range(m)])
        torch.testing.assert_close(update, expect.to(update.dtype), rtol=1e-10, atol=1e-12)


M, N, P = 2, 6, 5


# -- the MosT strategy's state without a whole FL run ----------------------------------------
# After rounds with pair sampling, Γ averaging and the switch rule, state_dict -> a fresh strategy
# must restore every field and continue bit-identically; a state without the optional keys loads
# with their documented starting values.
def _strategy(average):
    most = MosT(M, gamma_scale="code", update="code", solver="ipot", warm_start=True)
    kw = dict(gamma_momentum=0.5) if average == "ema" else dict(gamma_average="cumulative")
    return S.MosTStrategy(
        most, warmup_rounds=1, combine="switch", sample_fraction=0.5, gamma_average_start=1, ot_resolve=1, seed=3, **kw
    )


def _round(strat, r, gen):
    d = torch.randn(M, N, P, generator=gen, dtype=torch.float64)
    # losses up (round 2: the linear branch) then falling by 20x and more each round, so that
    # once the sampled pairs' fresh losses outweigh the stale cache S drops below its average
    # (the MGDA branch); how many rounds that takes depends on the draws
    scale = (1.0, 1.0, 5.0)[r] if r < 3 else 0.05 ** (r - 2)
    l = scale * (torch.rand(M, N, generator=gen, dtype=torch.float64) + 0.5)
    fresh = strat.sample_pairs(r, M, N)
    if fresh is not None:
        d, l = d * fresh.unsqueeze(-1), l * fresh
    return strat.aggregate(d, l, torch.ones(N), fresh=fresh)


FIELDS = ("rounds_done", "avg_objective", "branches", "gamma_updates", "gamma_count")


TENSORS = ("cache_deltas", "cache_losses", "gamma_avg")


@pytest.mark.parametrize("average", ["ema", "cumulative"])
def test_a_restored_strategy_continues_bit_identically(average):
    strat, gen = _strategy(average), torch.Generator().manual_seed(0)
    r = 0
    while r < 5 or (set(strat.branches) != {"linear", "mgda"} and r < 12):
        _round(strat, r, gen)
        r += 1
    assert set(strat.branches) == {"linear", "mgda"} and strat.gamma_updates > 1
    raw = io.BytesIO()
    torch.save(strat.state_dict(), raw)
    restored = _strategy(average)
    restored.load_state_dict(torch.load(io.BytesIO(raw.getvalue()), weights_only=False))
    for name in FIELDS:
        assert getattr(restored, name) == getattr(strat, name), name
    for name in TENSORS:
        assert torch.equal(getattr(restored, name), getattr(strat, name)), name
    if average == "cumulative":
        assert strat.gamma_count > 0
    state = gen.get_state()
    for next_round in (r, r + 1):
        a = _round(strat, next_round, gen)
        gen2 = torch.Generator()
        gen2.set_state(state)
        b = _round(restored, next_round, gen2)
        state = gen2.get_state()
        assert torch.equal(a, b)
    assert restored.branches == strat.branches and restored.avg_objective == strat.avg_objective


def test_a_state_without_the_optional_keys_starts_them_fresh():
    strat, gen = _strategy("cumulative"), torch.Generator().manual_seed(1)
    for r in range(4):
        _round(strat, r, gen)
    full = strat.state_dict()
    old = {k: v for k, v in full.items() if k not in (*FIELDS[1:], *TENSORS)}
    restored = _strategy("cumulative")
    restored.load_state_dict(old)
    assert restored.rounds_done == strat.rounds_done
    assert restored.avg_objective == 0.0 and restored.branches == []
    assert restored.gamma_updates == 0 and restored.gamma_count == 0
    assert all(getattr(restored, name) is None for name in TENSORS)


# -- robust aggregation: one Byzantine client sending huge updates -----------------------------
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


# -- the official MosT code's round (tianyi-lab/MosT federated_moo.py + update.py) as options ------
# Pair sampling with stale deltas and losses, the Γ moving average, the OT re-solve.
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


def test_sample_fraction_one_is_the_plain_round(monkeypatch):
    seen = spy_federation(monkeypatch)
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


def test_bad_values_raise_in_the_library():
    for kwargs, msg in [
        ({"sample_fraction": 0.0}, "sample_fraction"),
        ({"sample_fraction": 1.01}, "sample_fraction"),
        ({"gamma_momentum": 1.0}, "gamma_momentum"),
        ({"gamma_momentum": -0.5}, "gamma_momentum"),
        ({"gamma_average": "sma"}, "allowed: ema, cumulative"),
        ({"gamma_average": "cumulative", "gamma_momentum": 0.5}, "gamma_average=ema only"),
        ({"ot_resolve": -1}, "ot_resolve"),
    ]:
        with pytest.raises(ValueError, match=msg):
            S.MosTStrategy(_most(), **kwargs)
