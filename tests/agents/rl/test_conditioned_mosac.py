"""Preference-conditioned MO-SAC (agents/rl/conditioned_mosac.py): one update replayed by hand in
float64 with plain MLPs on ``[s, ω]`` and loops over groups, objectives and twins, against SAC's
formulas (arXiv:1812.05905, eq. 3, 5, 7, 18) with CAPQL's conditioning (Lu et al., ICLR 2023):

* critic: ``y_m = r_m + γ (1 − terminated) (min_j Q̄_{j,m}(s', a', ω) − α log π(a'|s', ω))``,
  loss ``Σ_j mean_b (Q_{j,m}(s, a, ω) − y_m)²`` per objective;
* actor, ``linear``: ``mean_b (α log π(ã|s,ω_b) − ω_b · min_j Q_j(s, ã, ω_b))`` (CAPQL's loss);
  an aggregator: group g's rows ``∇L_{g,m}`` through a fresh aggregator at ω_g, the mean over g;
* the preference samplers against their geometry (CAPQL's cone, Dirichlet(1)'s moments).
"""

import io
import math

import pytest
import torch
from host_traffic import forbid_host_traffic
from torch.distributions import Normal

import morl
from morl.agents.rl.conditioned_mosac import ConditionedMOSAC, max_cone_degrees, sample_preferences
from morl.agents.rl.mosac import IncompatibleState, MOSACConfig, regrets
from tests.agents.rl.test_mosac import _batch as mosac_batch
from tests.agents.rl.test_mosac import _mlp

O, A, M, B, G = 4, 2, 3, 12, 3
H = [8, 8]


def _agent(aggregator="linear", options=None, seed=0, **kw):
    cfg = MOSACConfig(population=10, hidden_sizes=H, batch_size=B, conditioned=True, groups=G, init_temperature=0.3)
    for key, value in kw.items():
        setattr(cfg, key, value)
    return ConditionedMOSAC(O, A, M, cfg, aggregator, options or {}, "cpu", seed)


def _batch(seed=0):
    return mosac_batch(seed, B, M)


def _draws(agent):
    """The next update's draws: a preference per transition ``[B, M]``, the critic's and actor's noise
    ``[B, A]`` (the agent's generator) and, for an aggregator, the group preferences ``[G, M]`` (its host
    generator)."""
    g = torch.Generator().set_state(agent.generator.get_state())
    rows = sample_preferences(B, M, "cone", 22.5, g, torch.device("cpu")).double()
    eps_next, eps = torch.randn(B, A, generator=g).double(), torch.randn(B, A, generator=g).double()
    h = torch.Generator().set_state(agent.host_generator.get_state())
    return rows, eps_next, eps, sample_preferences(G, M, "cone", 22.5, h, torch.device("cpu")).double()


def _policy(agent, actor, obs, w, eps):
    """Reparameterised action and log π from torch.distributions at inputs ``[s, ω]`` (float64)."""
    out = _mlp([x[0] for x in actor[0]], [x[0] for x in actor[1]], torch.cat([obs.double(), w], -1))
    mean, raw = out.chunk(2, -1)
    lo, hi = agent.cfg.log_std_min, agent.cfg.log_std_max
    std = (lo + 0.5 * (hi - lo) * (torch.tanh(raw) + 1)).exp()
    u = mean + std * eps
    logp = Normal(mean, std).log_prob(u).sum(-1) - torch.log1p(-torch.tanh(u).pow(2)).sum(-1)
    return torch.tanh(u), logp


def _qmin(critic, obs, w, act):
    """``[b, M]``: the minimum over the twins of each objective's Q(s, a, ω)."""
    x = torch.cat([obs.double(), w, act.double()], -1)
    twins = [_mlp([v[0, j] for v in critic.weights], [v[0, j] for v in critic.biases], x) for j in range(2)]
    return torch.minimum(*twins)


def _leaves(agent):
    leaves = [p.detach().double().clone().requires_grad_(True) for p in agent.actor.parameters()]
    n = len(agent.actor.weights)
    return leaves, [leaves[:n], leaves[n : 2 * n]]


def test_cone_preferences_lie_on_the_simplex_within_the_cone():
    w = sample_preferences(20_000, 3, "cone", 22.5, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert bool((w >= 0).all()) and torch.allclose(w.sum(1), torch.ones(20_000))
    cos = (w / w.norm(dim=1, keepdim=True)) @ torch.full((3,), 1 / math.sqrt(3))
    angles = torch.rad2deg(torch.arccos(cos.clamp(max=1)))
    assert float(angles.max()) <= 22.5 + 1e-3 and float(angles.max()) > 22.0  # θ ~ U(0, 22.5°) fills the cone
    assert abs(float(angles.mean()) - 11.25) < 0.2  # E θ = half the cone
    assert max_cone_degrees(3) == pytest.approx(math.degrees(math.atan(1 / math.sqrt(2))))


def test_simplex_preferences_have_the_moments_of_dirichlet_one():
    w = sample_preferences(40_000, 3, "simplex", 0.0, torch.Generator().manual_seed(1), torch.device("cpu"))
    # Dirichlet(1, 1, 1): E w_i = 1/3, Var w_i = (1 · 2) / (3² · 4) = 1/18
    torch.testing.assert_close(w.mean(0), torch.full((3,), 1 / 3), atol=6e-3, rtol=0)
    torch.testing.assert_close(w.var(0), torch.full((3,), 1 / 18), atol=2e-3, rtol=0)


def test_critic_losses_match_the_hand_computation():
    agent, batch = _agent(), _batch()
    rows, eps_next, _, _ = _draws(agent)
    _, actor = _leaves(agent)
    alpha = float(agent.log_alpha.detach().exp())
    a_next, logp_next = _policy(agent, actor, batch["next_obs"], rows, eps_next)
    q_next = _qmin(agent.critic_target, batch["next_obs"], rows, a_next)
    done = batch["terminated"].double().unsqueeze(1)
    y = batch["reward"].double() + agent.cfg.gamma * (1 - done) * (q_next - alpha * logp_next.unsqueeze(1))
    x = torch.cat([batch["obs"].double(), rows, batch["action"].double()], -1)
    c = agent.critic
    expected = sum(
        ((_mlp([v[0, j] for v in c.weights], [v[0, j] for v in c.biases], x) - y) ** 2).mean(0) for j in range(2)
    )
    out = agent.update(batch, 0)
    torch.testing.assert_close(out["critic_loss"].double(), expected, rtol=1e-5, atol=1e-6)


def test_linear_actor_gradient_is_the_gradient_of_capqls_loss():
    agent, batch = _agent(), _batch()
    rows, _, eps, _ = _draws(agent)
    leaves, actor = _leaves(agent)
    alpha = float(agent.log_alpha.detach().exp())
    agent.update(batch, 0)  # the actor's step reads the critic after its own step: the one now held
    act, logp = _policy(agent, actor, batch["obs"], rows, eps)
    loss = (alpha * logp - (rows * _qmin(agent.critic, batch["obs"], rows, act)).sum(1)).mean()
    for p, h in zip(agent.actor.parameters(), torch.autograd.grad(loss, leaves)):
        torch.testing.assert_close(p.grad.double(), h, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize(
    "name, key", [("epo_al", "preference"), ("upgrad", "pref_vector"), ("mgda", None), ("dwa", None), ("pcd", None)]
)
def test_aggregated_direction_is_the_mean_of_fresh_aggregators_at_each_groups_preference(name, key):
    """Gradient methods (``[M, D]`` rows) and loss weightings (EPO-AL, DWA: one backward) alike."""
    agent, batch = _agent(name), _batch()
    _, _, eps, w = _draws(agent)
    leaves, actor = _leaves(agent)
    alpha = float(agent.log_alpha.detach().exp())
    agent.update(batch, 0)
    b = B // G
    losses, qs = torch.zeros(G, M, dtype=torch.float64), torch.zeros(G, M, dtype=torch.float64)
    for g in range(G):
        obs, rows = batch["obs"][g * b : (g + 1) * b], w[g].expand(b, M)
        act, logp = _policy(agent, actor, obs, rows, eps[g * b : (g + 1) * b])
        q = _qmin(agent.critic, obs, rows, act).mean(0)
        losses[g], qs[g] = alpha * logp.mean() - q, q.detach()
    j = regrets(losses.detach(), qs)
    directions = []
    for g in range(G):
        rows = torch.stack([
            torch.cat([x.reshape(-1) for x in torch.autograd.grad(losses[g, m], leaves, retain_graph=True)])
            for m in range(M)
        ])  # fmt: skip
        own = {} if key is None else {key: w[g].tolist()}
        order = list(range(M))
        if name == "pcd":  # the primary objective (row 0) is the one ω_g prefers most
            top = int(w[g].argmax())
            order = [top, *[i for i in range(M) if i != top]]
        directions.append(morl.build(name, **own)(rows[order], j[g][order]))
    expected = torch.stack(directions).mean(0)
    got = torch.cat([p.grad.reshape(-1) for p in agent.actor.parameters()]).double()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_acting_at_given_preferences_is_the_conditioned_mean_and_collection_draws_per_row():
    agent = _agent()
    obs = torch.randn(5, O)
    w = torch.tensor([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [0.2, 0.3, 0.5], [1 / 3] * 3])
    _, actor = _leaves(agent)
    mean = _mlp([x[0] for x in actor[0]], [x[0] for x in actor[1]], torch.cat([obs, w], -1).double()).chunk(2, -1)[0]
    torch.testing.assert_close(agent.act(obs, w, deterministic=True).double(), torch.tanh(mean), rtol=1e-5, atol=1e-6)
    same = obs[:1].expand(5, O)
    a = agent.act(same, deterministic=True)  # a fresh preference per row: the same state, other actions
    assert len({tuple(r.tolist()) for r in a}) == 5
    with pytest.raises(ValueError, match=r"preferences must be \[N=5, M=3\]"):
        agent.act(obs, w[:, :2])


def test_a_zero_temperature_rate_keeps_the_temperature_fixed():
    """``alpha_lr: 0``: α stays at ``init_temperature`` (CAPQL's fixed 0.2)."""
    agent = _agent(alpha_lr=0.0, init_temperature=0.2)
    outs = [agent.update(_batch(step), step) for step in range(3)]
    assert all(float(o["alpha"]) == pytest.approx(0.2) for o in outs) and float(outs[-1]["alpha_loss"]) != 0.0


@pytest.mark.parametrize("name", ["linear", "epo_al"])
def test_state_dict_round_trip_gives_identical_next_update(name):
    agent = _agent(name)
    for step in range(3):
        agent.update(_batch(step), step)
    raw = io.BytesIO()
    torch.save(agent.state_dict(), raw)
    restored = _agent(name, seed=5)
    restored.load_state_dict(torch.load(io.BytesIO(raw.getvalue()), weights_only=False))
    for step in (3, 4):
        out_a, out_b = agent.update(_batch(step + 9), step), restored.update(_batch(step + 9), step)
        assert all(torch.equal(out_a[k], out_b[k]) for k in out_a)
    for m in ("actor", "critic", "critic_target"):
        assert all(torch.equal(x, y) for x, y in zip(getattr(agent, m).parameters(), getattr(restored, m).parameters()))
    with pytest.raises(IncompatibleState, match="other sizes"):
        _agent(name, hidden_sizes=[8, 6]).load_state_dict(agent.state_dict())


@pytest.mark.parametrize("field", ["reward", "obs"])
@pytest.mark.parametrize("name", ["linear", "mgda"])
def test_nan_never_reaches_the_parameters(field, name):
    agent = _agent(name)
    agent.update(_batch(1), 1)
    batch = _batch()
    batch[field][3].fill_(float("nan"))
    critic = [c.detach().clone() for c in agent.critic.parameters()]
    out = agent.update(batch, 2)
    assert int(out["nonfinite_updates"]) == 1
    for p in [*agent.actor.parameters(), *agent.critic.parameters(), agent.log_alpha]:
        assert bool(torch.isfinite(p).all())
    assert all(torch.equal(a, b) for a, b in zip(critic, agent.critic.parameters()))


@pytest.mark.parametrize(
    "name, kw, words",
    [
        ("famo", {}, ["famo", "losses after each update"]),
        ("linear", {"groups": 5}, ["agent.batch_size=12", "agent.groups=5"]),
        ("linear", {"cone_degrees": 40.0}, ["agent.cone_degrees", "(0, 35.26]"]),
        ("linear", {"assignment": "transport"}, ["transport", "conditioned"]),
        ("linear", {"preference_sampling": "grid"}, ["agent.preference_sampling='grid'", "cone, simplex"]),
    ],
)
def test_a_bad_config_is_one_line_naming_the_field(name, kw, words):
    with pytest.raises(ValueError) as err:
        _agent(name, **kw)
    assert len(str(err.value).splitlines()) == 1
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_a_linear_update_moves_nothing_between_host_and_device(device, monkeypatch):
    """tests/aggregators/test_update_no_sync.py's protocol (the aggregated path draws its preferences on
    the host, where the aggregators take them)."""
    import torch.optim.adam as torch_adam

    from tests.aggregators.test_update_no_sync import CPU_ONLY_READS

    monkeypatch.setattr(torch_adam, "_device_dtype_check_for_fused", lambda p: None)
    cfg = MOSACConfig(population=10, hidden_sizes=H, batch_size=B, conditioned=True, groups=G)
    agent = ConditionedMOSAC(O, A, M, cfg, "linear", {}, device, 0)
    batch = {k: (torch.empty(v.shape, device="meta") if device == "meta" else v) for k, v in _batch().items()}
    agent.update(batch, 0)
    with forbid_host_traffic(strict_cpu=device == "cpu", allow=CPU_ONLY_READS):
        out = agent.update(batch, 1)
    assert all(v.device.type == device for v in out.values())
