"""MO-SAC (agents/rl/mosac.py): one update replayed by hand in float64, policy by policy,
objective by objective and twin by twin with plain loops (the agent batches them), against SAC's
formulas (arXiv:1812.05905, eq. 3, 5, 7, 18, with the minimum of two target critics):

* Q_{j,p,m} is output m of twin j of policy p's critic (member p of the ensemble);
  ``y = r_m + γ (1 − terminated) (min_j Q̄_{j,p,m}(s', a'_p) − α_p log π_p(a'_p|s'))``, the minimum
  per objective, ``a'_p`` policy p's own next action; loss ``Σ_j mean_b (Q_{j,p,m}(s, a) − y)²``,
  the critics descend the sum over (p, m);
* actor: ``L_{p,m} = mean_b (α_p log π_p(ã|s) − min_j Q_{j,p,m}(s, ã))``; ``linear`` descends
  ``Σ_p Σ_m ω_{p,m} L_{p,m}``, an aggregator maps policy p's rows ``∇L_{p,m}`` to its direction;
* after one Adam step the first moment is ``0.1 g``: the gradient the update used.
"""

import copy
import io
import math

import pytest
import torch
from host_traffic import HostTraffic, forbid_host_traffic
from torch.distributions import Normal

import morl
from morl.agents.rl import mosac
from morl.agents.rl.mosac import (
    MOSAC,
    IncompatibleState,
    MOSACConfig,
    assignment_cost,
    default_preferences,
    preference_matrix,
    transport_preferences,
)

O, A, M, P, B = 4, 2, 2, 3, 8
H = [8, 8]


def _agent(aggregator="linear", options=None, seed=0, **kw):
    cfg = MOSACConfig(population=P, hidden_sizes=H, batch_size=B, actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3)
    for key, value in kw.items():
        setattr(cfg, key, value)
    return MOSAC(O, A, M, cfg, aggregator, options or {}, "cpu", seed)


def _batch(seed=0, b=B, m=M):
    g = torch.Generator().manual_seed(seed)
    terminated = torch.zeros(b)
    terminated[::3] = 1.0
    return {
        "obs": torch.randn(b, O, generator=g),
        "action": torch.rand(b, A, generator=g) * 2 - 1,
        "reward": torch.randn(b, m, generator=g),
        "next_obs": torch.randn(b, O, generator=g),
        "terminated": terminated,
    }


def _noises(agent):
    """The critic's and the actor's noise of the agent's next update (a copy of its generator)."""
    g = torch.Generator().set_state(agent.generator.get_state())
    return [torch.randn(P, B, A, generator=g).double() for _ in range(2)]


def _mlp(weights, biases, x):
    for i, (w, b) in enumerate(zip(weights, biases)):
        x = x @ w.double() + b.double().reshape(-1)
        if i < len(weights) - 1:
            x = torch.relu(x)
    return x


def _policy(agent, weights, p, obs, eps):
    """Policy p's reparameterised action and log π from torch.distributions (float64)."""
    out = _mlp([w[p] for w in weights[0]], [b[p] for b in weights[1]], obs.double())
    mean, raw = out.chunk(2, -1)
    lo, hi = agent.cfg.log_std_min, agent.cfg.log_std_max
    std = (lo + 0.5 * (hi - lo) * (torch.tanh(raw) + 1)).exp()
    u = mean + std * eps
    logp = Normal(mean, std).log_prob(u).sum(-1) - torch.log1p(-torch.tanh(u).pow(2)).sum(-1)
    return torch.tanh(u), logp


def _q(critic, p, m, j, obs, act):
    """Q_{j,p,m}: output m of twin j of policy p's critic (ensemble member p)."""
    x = torch.cat([obs.double(), act], -1)
    return _mlp([w[p, j] for w in critic.weights], [b[p, j] for b in critic.biases], x)[:, m]


def _actor_weights(agent):
    return [list(agent.actor.weights), list(agent.actor.biases)]


def _hand_critic_losses(agent, batch, eps_next, critic, target, actor_weights, alpha):
    obs, action, r = batch["obs"], batch["action"].double(), batch["reward"].double()
    done = batch["terminated"].double()
    losses = torch.zeros(P, M, dtype=torch.float64)
    for p in range(P):
        a_next, logp_next = _policy(agent, actor_weights, p, batch["next_obs"], eps_next[p])
        for m in range(M):
            q_next = torch.minimum(*[_q(target, p, m, j, batch["next_obs"], a_next) for j in range(2)])
            y = r[:, m] + agent.cfg.gamma * (1 - done) * (q_next - alpha[p] * logp_next)
            losses[p, m] = sum(((_q(critic, p, m, j, obs, action) - y.detach()) ** 2).mean() for j in range(2))
    return losses


def _hand_actor_losses(agent, actor_weights, obs, eps, alpha):
    """``L [P, M]`` and the batch-mean Q-values ``[P, M]`` by loops, from the critic after its step."""
    losses, qs = torch.zeros(P, M, dtype=torch.float64), torch.zeros(P, M, dtype=torch.float64)
    for p in range(P):
        act, logp = _policy(agent, actor_weights, p, obs, eps[p])
        for m in range(M):
            q = torch.minimum(*[_q(agent.critic, p, m, j, obs, act) for j in range(2)]).mean()
            losses[p, m], qs[p, m] = alpha[p] * logp.mean() - q, q
    return losses, qs


def _moments(opt, params):
    return [opt.state[p]["exp_avg"].double() / 0.1 for p in params]


def _leaf_copies(params):
    return [p.detach().double().clone().requires_grad_(True) for p in params]


def test_default_preferences_are_equally_spaced_with_the_corners():
    expected = torch.tensor([[1, 0], [2 / 3, 1 / 3], [1 / 3, 2 / 3], [0, 1]], dtype=torch.float64)
    assert torch.equal(default_preferences(2, 4), expected)
    lattice = default_preferences(3, 6)  # step 1/2 on the 3-simplex
    assert {tuple(r) for r in (2 * lattice).tolist()} == {
        (2, 0, 0), (0, 2, 0), (0, 0, 2), (1, 1, 0), (1, 0, 1), (0, 1, 1)
    }  # fmt: skip
    from morl.metrics.pareto import equally_spaced_weights

    assert torch.equal(default_preferences(3, 20), equally_spaced_weights(3, 20))  # no lattice has 20 points
    assert torch.equal(default_preferences(3, 1), torch.full((1, 3), 1 / 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="population=7.*allowed: 3, 6, 10"):
        default_preferences(3, 7)
    given = preference_matrix(MOSACConfig(population=2, preferences=[[3, 1], [0, 2]]), 2)
    assert torch.equal(given, torch.tensor([[0.75, 0.25], [0.0, 1.0]], dtype=torch.float64))


def test_critic_targets_and_losses_match_the_hand_computation():
    agent = _agent(init_temperature=0.5)
    agent.update(_batch(1), 1)  # moves the temperatures and the targets away from their start
    batch = _batch()
    eps_next, _ = _noises(agent)
    alpha = agent.log_alpha.detach().exp().double()
    critic, target, weights = copy.deepcopy(agent.critic), copy.deepcopy(agent.critic_target), _actor_weights(agent)
    weights = [[w.detach().clone() for w in ws] for ws in weights]
    hand = _hand_critic_losses(agent, batch, eps_next, critic, target, weights, alpha)
    got = agent.critic_losses(*[batch[k] for k in ("obs", "action", "reward", "next_obs", "terminated")],
                              agent.log_alpha.detach().exp(), eps_next.float())  # fmt: skip
    torch.testing.assert_close(got.double(), hand, rtol=1e-5, atol=1e-5)
    # the update's critic gradient is the gradient of the hand losses' sum
    leaves = _leaf_copies(critic.parameters())
    shadow = copy.deepcopy(critic).double()
    for p, leaf in zip(shadow.parameters(), leaves):
        p.data = leaf
    fresh = _agent(init_temperature=0.5)
    fresh.load_state_dict(agent.state_dict())
    fresh.critic_opt.state.clear()  # a first Adam step: its first moment is 0.1 g
    fresh.update(batch, 1)
    hand_losses = _hand_critic_losses(fresh, batch, eps_next, _Leaves(shadow, leaves), target, weights, alpha)
    grads = torch.autograd.grad(hand_losses.sum(), leaves)
    for g, h in zip(_moments(fresh.critic_opt, fresh.critic.parameters()), grads):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-6)


class _Leaves:
    """A critic whose weights are the given float64 leaves (for autograd on the hand losses)."""

    def __init__(self, module, leaves):
        n = len(module.weights)
        self.weights, self.biases = leaves[:n], leaves[n : 2 * n]


def test_a_sign_flip_of_the_reward_changes_the_target():
    agent = _agent()
    batch = _batch()
    eps_next, _ = _noises(agent)
    alpha = agent.log_alpha.detach().exp()
    args = [batch[k] for k in ("reward", "next_obs", "terminated")]
    y = agent.td_target(*args, alpha, eps_next.float())
    flipped = agent.td_target(-args[0], *args[1:], alpha, eps_next.float())
    torch.testing.assert_close(y - flipped, 2 * batch["reward"].expand(P, B, M))


def _actor_gradient_setup(aggregator, options=None, **kw):
    agent = _agent(aggregator, options, init_temperature=0.3, **kw)
    batch = _batch()
    _, eps = _noises(agent)
    alpha = agent.log_alpha.detach().exp().double()
    leaves = _leaf_copies(agent.actor.parameters())
    n = len(agent.actor.weights)
    weights = [leaves[:n], leaves[n : 2 * n]]
    out = agent.update(batch, 0)  # the actor's step reads the critic after its own step: the one now held
    losses, qs = _hand_actor_losses(agent, weights, batch["obs"], eps, alpha)
    return agent, leaves, losses, qs, out


def test_linear_actor_gradient_is_the_gradient_of_the_scalarised_loss():
    agent, leaves, losses, _, _ = _actor_gradient_setup("linear")
    omega = agent.preferences.double()
    grads = torch.autograd.grad((omega * losses).sum(), leaves)
    for g, h in zip(_moments(agent.actor_opt, agent.actor.parameters()), grads):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-7)
    assert torch.equal(agent.preferences, default_preferences(M, P).float())  # the extremes included


@pytest.mark.parametrize(
    "name, options, assignment",
    [
        ("mgda", {}, "fixed"),
        ("epo_al", {}, "fixed"),
        ("pcd", {"tau": 0.1}, "fixed"),
        ("upgrad", {}, "fixed"),
        ("epo_al", {}, "transport"),
        ("pcd", {"tau": 0.1}, "transport"),
        ("upgrad", {}, "transport"),
    ],
)
def test_aggregated_direction_is_the_aggregator_on_rows_computed_one_by_one(name, options, assignment):
    # transport: the preferences assigned at this update (step 0) are the ones its aggregators use
    given = {} if assignment == "fixed" else {"preferences": GIVEN}
    agent, leaves, losses, qs, out = _actor_gradient_setup(name, options, assignment=assignment, **given)
    omega = agent.host_preferences
    if assignment == "transport":
        torch.testing.assert_close(omega, _pot_preferences(qs), rtol=0, atol=1e-6)
        assert not torch.allclose(omega, torch.tensor(GIVEN, dtype=torch.float64))
    regret = losses.detach() + qs.detach().amax(0)  # the losses aggregators see: shortfall to the ideal point
    directions, cosines = [], []
    for p in range(P):
        rows = torch.stack(
            [torch.cat([g[p].reshape(-1) for g in torch.autograd.grad(losses[p, m], leaves, retain_graph=True)])
             for m in range(M)]
        )  # fmt: skip
        unit = rows / rows.norm(dim=1, keepdim=True)
        cosines.append(min(float(unit[i] @ unit[k]) for i in range(M) for k in range(i + 1, M)))
        own = {}
        if name == "epo_al":  # EPO's preference ray is ω_p (zeros raised to 1e-3: EPO-AL needs r > 0)
            own = {"preference": omega[p].clamp_min(1e-3).tolist()}
        if name == "upgrad":
            own = {"pref_vector": omega[p].tolist()}
        order = list(range(M))
        if name == "pcd":  # the primary objective (row 0) is the one policy p prefers most
            top = int(omega[p].argmax())
            order = [top, *[i for i in range(M) if i != top]]
        directions.append(morl.build(name, **options, **own)(rows[order], regret[p][order]))
    for g, param in zip(_moments(agent.actor_opt, agent.actor.parameters()), agent.actor.parameters()):
        size = param[0].numel()
        expected = torch.stack([d[:size] for d in directions])
        directions = [d[size:] for d in directions]
        torch.testing.assert_close(g.reshape(P, -1), expected, rtol=1e-4, atol=1e-6)
    if not morl.build(name, **options).needs_grads:  # EPO-AL's weights read the losses only: one backward, no rows
        assert "grad_cos" not in out
        return
    # grad_cos: the smallest cosine between two of policy p's rows
    torch.testing.assert_close(out["grad_cos"].double(), torch.tensor(cosines, dtype=torch.float64), atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["mgda", "upgrad"])
def test_a_non_finite_gradient_row_refuses_the_whole_actor_step(name):
    """An aggregator zeroes a policy's direction when one of its rows is NaN/inf ("skip"); the step
    is then refused for every actor rather than taken with that direction zeroed (Adam's momentum
    would still move the policy)."""
    agent = _agent(name)
    agent.update(_batch(1), 1)  # Adam holds momentum from here on
    before = [p.detach().clone() for p in agent.actor.parameters()]
    alpha = agent.log_alpha.detach().exp().clone()
    alpha[1] = float("inf")  # policy 1's rows ∇(α_1 log π_1) are not finite, the others' are
    _, ok, _ = agent._actor_step(_batch()["obs"], alpha)
    assert not bool(ok)
    assert all(torch.equal(a, b) for a, b in zip(before, agent.actor.parameters()))


def test_each_policy_acts_with_its_own_weights():
    agent = _agent()
    obs = torch.randn(P, O)
    got = agent.act(obs, deterministic=True)
    for p in range(P):
        out = _mlp([w[p] for w in agent.actor.weights], [b[p] for b in agent.actor.biases], obs[p : p + 1].double())
        torch.testing.assert_close(got[p].double(), torch.tanh(out.chunk(2, -1)[0][0]), rtol=1e-5, atol=1e-6)
    sampled = agent.act(obs)
    assert sampled.shape == (P, A) and bool((sampled.abs() <= 1).all())
    with pytest.raises(ValueError, match=r"obs must be \[P=3"):
        agent.act(torch.randn(P + 1, O))


def test_temperatures_and_targets():
    agent = _agent(target_update_freq=2, init_temperature=0.2)
    targets = [t.detach().clone() for t in agent.critic_target.parameters()]
    out = agent.update(_batch(), 1)  # odd step: no Polyak update
    assert all(torch.equal(a, b) for a, b in zip(targets, agent.critic_target.parameters()))
    # each log α_p moves by its own entropy gap: up when policy p's entropy is below the target −A
    moved = torch.sign(agent.log_alpha.detach() - math.log(0.2))
    assert torch.equal(moved, torch.sign(agent.target_entropy - out["entropy"]))
    agent.update(_batch(), 2)
    for t, old, c in zip(agent.critic_target.parameters(), targets, agent.critic.parameters()):
        torch.testing.assert_close(t, 0.995 * old + 0.005 * c.detach())


GIVEN = [[0.2, 0.8], [0.7, 0.3], [0.4, 0.6]]  # no vertex of the transport polytope gives these


def _hand_cost(qs):
    """``C [M, P]`` by loops: minus policy p's Q-value of objective m standardised over the policies."""
    cost = torch.zeros(qs.shape[1], qs.shape[0], dtype=torch.float64)
    for m in range(qs.shape[1]):
        col = [float(v) for v in qs[:, m].detach()]
        mean = sum(col) / len(col)
        std = math.sqrt(sum((v - mean) ** 2 for v in col) / len(col))
        for p, v in enumerate(col):
            cost[m, p] = -(v - mean) / std
    return cost


def _pot_preferences(qs):
    """ω from POT's exact OT plan (``ot.emd``, marginals 1/M and 1/P) on the hand cost."""
    import ot

    cost = _hand_cost(qs.double())
    m, p = cost.shape
    plan = torch.as_tensor(ot.emd(torch.full((m,), 1 / m).double().numpy(), torch.full((p,), 1 / p).double().numpy(),
                                  cost.numpy()))  # fmt: skip
    return (plan / plan.sum(0)).T


def test_the_transport_plan_of_an_obvious_cost():
    # policies 0 and 1 have the larger Q-values of objective 0, policies 2 and 3 of objective 1
    q = torch.tensor([[3.0, 0.0], [2.0, 1.0], [1.0, 2.0], [0.0, 3.0]], dtype=torch.float64)
    s = math.sqrt(1.25)  # the standard deviation of 0, 1, 2, 3
    expected_cost = torch.tensor([[-1.5, -0.5, 0.5, 1.5], [1.5, 0.5, -0.5, -1.5]], dtype=torch.float64) / s
    torch.testing.assert_close(assignment_cost(q), expected_cost)
    onehot = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    for method in ("ipot", "sinkhorn"):
        plan, omega = transport_preferences(q, method=method)
        torch.testing.assert_close(plan, onehot.T / 4, rtol=0, atol=1e-9)
        torch.testing.assert_close(omega, onehot, rtol=0, atol=1e-9)
    _, omega = transport_preferences(q[:, [1, 0]])  # the policies' standings swapped: so are their objectives
    torch.testing.assert_close(omega, onehot.flip(0), rtol=0, atol=1e-9)
    _, omega = transport_preferences(torch.eye(2, dtype=torch.float64))  # M = P = 2
    torch.testing.assert_close(omega, torch.eye(2, dtype=torch.float64), rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_transport_preferences_match_pot_exact_plan(seed):
    g = torch.Generator().manual_seed(seed)
    # P >= 3: with two policies each standardised row is ±1 and the optimal plan is not unique
    for p, m in ((3, 2), (6, 3), (4, 3), (5, 2)):
        q = torch.randn(p, m, generator=g, dtype=torch.float64) * 50
        torch.testing.assert_close(assignment_cost(q), _hand_cost(q))
        torch.testing.assert_close(transport_preferences(q)[1], _pot_preferences(q), rtol=0, atol=1e-6)


def test_transport_assigns_before_the_linear_actor_step_and_from_its_q_values():
    agent, leaves, losses, qs, _ = _actor_gradient_setup("linear", assignment="transport", preferences=GIVEN)
    omega = agent.host_preferences
    torch.testing.assert_close(omega, _pot_preferences(qs), rtol=0, atol=1e-6)
    assert torch.equal(agent.preferences, omega.float())
    grads = torch.autograd.grad((omega * losses).sum(), leaves)  # the step already used the new ω
    for g, h in zip(_moments(agent.actor_opt, agent.actor.parameters()), grads):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-7)


def _recorded_solves(monkeypatch):
    calls = []
    real = mosac.transport.solve

    def recording(cost, **kw):
        calls.append(kw)
        return real(cost, **kw)

    monkeypatch.setattr(mosac.transport, "solve", recording)
    return calls


@pytest.mark.parametrize("assign_every, actor_update_freq, expected", [(3, 1, [0, 3, 6]), (4, 2, [0, 4])])
def test_the_preferences_change_exactly_every_assign_every_updates(
    assign_every, actor_update_freq, expected, monkeypatch
):
    calls = _recorded_solves(monkeypatch)
    agent = _agent(assignment="transport", assign_every=assign_every, actor_update_freq=actor_update_freq,
                   transport_tau=0.25, transport_method="sinkhorn", preferences=GIVEN)  # fmt: skip
    assigned, before = [], agent.host_preferences
    for step in range(8):
        n = len(calls)
        out = agent.update(_batch(step), step)
        if len(calls) > n:
            assigned.append(step)
        else:
            assert torch.equal(agent.host_preferences, before), step
        assert torch.equal(out["preferences"], agent.preferences)
        before = agent.host_preferences
    assert assigned == expected
    assert all(kw == {"tau": 0.25, "method": "sinkhorn"} for kw in calls)


def test_fixed_preferences_never_change(monkeypatch):
    calls = _recorded_solves(monkeypatch)
    agent = _agent("epo_al", assign_every=1, preferences=GIVEN)
    for step in range(3):
        out = agent.update(_batch(step), step)
    assert calls == [] and torch.equal(agent.host_preferences, agent.config_preferences)
    assert torch.equal(out["preferences"], agent.config_preferences.float())
    assert [a.preference.tolist() for a in agent.aggregators] == agent.config_preferences.tolist()


def test_a_non_finite_batch_keeps_the_preferences():
    agent = _agent(assignment="transport", assign_every=2)
    agent.update(_batch(0), 0)
    assigned = agent.host_preferences
    batch = _batch(1)
    batch["obs"][2].fill_(float("nan"))  # the actor step's Q-values are NaN: the update is skipped
    out = agent.update(batch, 2)
    assert int(out["nonfinite_updates"]) == 1
    assert torch.equal(agent.host_preferences, assigned) and torch.equal(out["preferences"], assigned.float())


def test_a_checkpoint_of_the_older_critic_layout_fails_with_one_line():
    from morl.agents.rl.networks import TwinCriticEnsemble

    state = _agent().state_dict()
    older = TwinCriticEnsemble(O, A, P * M, H).state_dict()  # one scalar twin critic per policy and objective
    with pytest.raises(IncompatibleState) as err:
        _agent().load_state_dict({**state, "critic": older, "critic_target": older})
    (line,) = str(err.value).splitlines()
    assert "critics are 6 twin critics with 1 output, hidden [8, 8]" in line
    assert "expects 3 twin critics with 2 outputs, hidden [8, 8]" in line and "older layout" in line
    with pytest.raises(
        IncompatibleState, match=r"hidden \[8, 4\]; this MO-SAC expects 3 twin critics with 2 outputs, hidden \[8, 8\]"
    ):
        _agent().load_state_dict({**state, "critic": TwinCriticEnsemble(O, A, P, [8, 4], out_dim=M).state_dict()})


@pytest.mark.parametrize(
    "name, options, assignment",
    [
        ("linear", {}, "fixed"),
        ("epo_al", {}, "fixed"),
        ("pcd", {}, "fixed"),
        ("moco", {}, "fixed"),
        ("linear", {}, "transport"),
        ("epo_al", {}, "transport"),
        ("pcd", {}, "transport"),
    ],
)
def test_state_dict_round_trip_gives_identical_next_update(name, options, assignment):
    kw = {"assignment": assignment, "assign_every": 2, "preferences": GIVEN}
    agent = _agent(name, options, **kw)
    for step in range(3):
        agent.update(_batch(step), step)
    raw = io.BytesIO()
    torch.save(agent.state_dict(), raw)
    restored = _agent(name, options, seed=5, **kw)
    restored.load_state_dict(torch.load(io.BytesIO(raw.getvalue()), weights_only=False))
    assert torch.equal(restored.host_preferences, agent.host_preferences)
    assert (assignment == "transport") != torch.equal(agent.host_preferences, agent.config_preferences)
    for step in (3, 4):  # transport: update 4 assigns again
        out_a, out_b = agent.update(_batch(step + 9), step), restored.update(_batch(step + 9), step)
        assert out_a.keys() == out_b.keys()
        for key in out_a:
            assert torch.equal(out_a[key], out_b[key]), key
    for m in ("actor", "critic", "critic_target"):
        assert all(torch.equal(x, y) for x, y in zip(getattr(agent, m).parameters(), getattr(restored, m).parameters()))
    other = _agent(name, options, preferences=[[0.5, 0.5]] * P)
    with pytest.raises(IncompatibleState, match="other preferences"):
        other.load_state_dict(agent.state_dict())


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
    agent.update(_batch(1), 3)
    assert int(agent.nonfinite_updates) == 1 and int(agent.nonfinite_streak) == 0


@pytest.mark.parametrize(
    "name, options, words",
    [
        ("nash", {}, ["unknown aggregator 'nash'", "linear", "mgda"]),
        ("epo_al", {"preference": [1, 1]}, ["preference", "agent.preferences"]),
        ("upgrad", {"pref_vector": [1, 1]}, ["pref_vector", "agent.preferences"]),
        ("pcd", {"tau": [0.1, 0.1]}, ["do not fit 2 objectives", "tau"]),
        ("famo", {}, ["famo", "losses after each update"]),
        ("linear", {"c": 1}, ["linear takes no options"]),
    ],
)
def test_aggregators_that_do_not_fit_fail_with_one_line(name, options, words):
    with pytest.raises(ValueError) as err:
        _agent(name, options)
    assert len(str(err.value).splitlines()) == 1
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"population": 0}, ["agent.population", ">= 1"]),
        ({"preferences": [[1, 0]]}, ["agent.preferences has 1 rows", "population=3"]),
        ({"preferences": [[1, 0, 0]] * P}, ["2 entries per row"]),
        ({"preferences": [[1, -1]] * P}, [">= 0"]),
        ({"tau": 0.0}, ["agent.tau"]),
        ({"assignment": "most"}, ["agent.assignment='most'", "allowed: fixed, transport"]),
        ({"assign_every": 0}, ["agent.assign_every", "multiple >= 1", "got 0"]),
        ({"assign_every": 3, "actor_update_freq": 2}, ["agent.assign_every", "actor_update_freq=2", "got 3"]),
        ({"transport_tau": -0.5}, ["agent.transport_tau", ">= 0", "-0.5"]),
        ({"transport_tau": float("inf")}, ["agent.transport_tau", "finite"]),
        ({"transport_method": "emd"}, ["agent.transport_method='emd'", "allowed: ipot, sinkhorn"]),
        ({"alpha_lr": -1e-3}, ["agent.alpha_lr must be >= 0", "-0.001"]),
    ],
)
def test_a_bad_config_names_the_field(kw, words):
    with pytest.raises(ValueError) as err:
        _agent(**kw)
    assert len(str(err.value).splitlines()) == 1
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("device", ["meta", "cpu"])
@pytest.mark.parametrize("name", ["linear", "uw", "mgda", "epo_al"])
def test_an_update_moves_nothing_between_host_and_device(name, device, monkeypatch):
    """tests/aggregators/test_update_no_sync.py's protocol: meta tensors (any value read raises)
    and the CPU with every Python-level read forbidden; two updates after a first unguarded one
    (EPO-AL copies its preference to the device at its first call). One aggregator per path of
    the update: linear, a loss weighting (one backward), a Gramian method and one with a
    preference (the [M, D_p] rows); every aggregator's own no-sync test is test_update_no_sync.py's."""
    import torch.optim.adam as torch_adam

    from tests.aggregators.test_update_no_sync import CPU_ONLY_READS

    monkeypatch.setattr(torch_adam, "_device_dtype_check_for_fused", lambda p: None)
    cfg = MOSACConfig(population=P, hidden_sizes=H, batch_size=B)
    agent = MOSAC(O, A, M, cfg, name, {}, device, 0)
    batch = {k: (torch.empty(v.shape, device="meta") if device == "meta" else v) for k, v in _batch().items()}
    agent.update(batch, 0)
    with forbid_host_traffic(strict_cpu=device == "cpu", allow=CPU_ONLY_READS):
        for step in (1, 2):
            out = agent.update(batch, step)
    assert all(v.device.type == device for v in out.values())


@pytest.mark.parametrize("name", ["linear", "epo_al"])
def test_updates_between_two_assignments_move_nothing_between_host_and_device(name, monkeypatch):
    """The transport solve reads its cost and plan on the host; only the assigning updates do."""
    import torch.optim.adam as torch_adam

    from tests.aggregators.test_update_no_sync import CPU_ONLY_READS

    monkeypatch.setattr(torch_adam, "_device_dtype_check_for_fused", lambda p: None)
    agent = _agent(name, assignment="transport", assign_every=3)
    agent.update(_batch(), 0)  # assigns
    with forbid_host_traffic(strict_cpu=True, allow=CPU_ONLY_READS):
        for step in (1, 2):
            agent.update(_batch(step), step)
    with pytest.raises(HostTraffic), forbid_host_traffic(strict_cpu=True, allow=CPU_ONLY_READS):
        agent.update(_batch(3), 3)  # assigns
