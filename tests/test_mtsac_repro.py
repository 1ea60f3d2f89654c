"""MT-SAC's reproduction options (mtrl / CAGrad's MT10 learner): each option's effect, checked
against hand formulas (docs/mtsac.md, "Reproducing the literature's MT10 runs")."""

import io
import math

import pytest
import torch

import morl
from morl.agents.rl.mtsac import MTSAC, MTSACConfig
from morl.agents.rl.networks import TaskActor, TwinCriticEnsemble, squashed_sample

T, OBS_RAW, A, B = 3, 5, 2, 16
OBS = OBS_RAW + T


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _agent(aggregator="mean", seed=0, **kw):
    cfg = dict(hidden_sizes=[32, 32], batch_size=T * B, buffer_capacity=1000, actor_lr=1e-3, critic_lr=1e-3,
               alpha_lr=1e-3)
    cfg.update(kw)
    agg = aggregator if isinstance(aggregator, morl.Aggregator) else morl.build(aggregator)
    return MTSAC(OBS, A, T, MTSACConfig(**cfg), agg, "cpu", seed)


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, B, OBS, generator=g)
    obs[..., OBS_RAW:] = torch.eye(T).unsqueeze(1)
    next_obs = obs.clone()
    next_obs[..., :OBS_RAW] += 0.1 * torch.randn(T, B, OBS_RAW, generator=g)
    return {"obs": obs, "action": torch.rand(T, B, A, generator=g) * 2 - 1, "reward": torch.randn(T, B, generator=g),
            "next_obs": next_obs, "terminated": torch.zeros(T, B)}


def _capture(module):
    seen = []
    module.register_forward_hook(lambda m, args, out: seen.append([a.detach().clone() for a in args]))
    return seen


def _mlp_q(weights, biases, j, x):
    """Q-network j of a shared critic, written out layer by layer (weights [1, 2, in, out])."""
    for i, (w, b) in enumerate(zip(weights, biases)):
        x = x @ w[0, j] + b[0, j, 0]
        if i < len(weights) - 1:
            x = torch.relu(x)
    return x.squeeze(-1)


# -- critic: shared ------------------------------------------------------------------------
def test_shared_critic_is_one_twin_pair_over_all_tasks():
    agent = _agent(critic="shared")
    assert all(w.shape[:2] == (1, 2) for w in agent.critic.weights)
    per_task = _agent()
    shared_size = sum(p.numel() for p in agent.critic.parameters())
    assert T * shared_size == sum(p.numel() for p in per_task.critic.parameters())


def test_shared_critic_losses_go_through_the_aggregator_one_row_per_task():
    # gamma = 0: the TD target is the reward, so task t's loss is a hand formula of the critic alone
    agent = _agent("cagrad", critic="shared", aggregate_critic=True, gamma=0.0, task_input="none")
    seen = _capture(agent.critic_aggregator)
    weights = [w.detach().clone().requires_grad_(True) for w in agent.critic.weights]
    biases = [b.detach().clone().requires_grad_(True) for b in agent.critic.biases]
    batch = _batch()
    agent.update(batch, step=0)
    matrix, losses = seen[0]
    size = sum(p.numel() for p in agent.critic.parameters())
    assert matrix.shape == (T, size)
    for t in range(T):
        x = torch.cat([batch["obs"][t, :, :OBS_RAW], batch["action"][t]], dim=-1)
        loss = sum(((_mlp_q(weights, biases, j, x) - batch["reward"][t]) ** 2).mean() for j in range(2))
        grads = torch.autograd.grad(loss, [*weights, *biases])
        named = dict(agent.critic.named_parameters())
        by_name = dict(zip([f"weights.{i}" for i in range(len(weights))] + [f"biases.{i}" for i in range(len(biases))],
                           grads))
        expected = torch.cat([by_name[n].reshape(-1) for n in named])
        torch.testing.assert_close(matrix[t], expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(losses[t], loss.detach(), rtol=1e-5, atol=1e-6)


def test_shared_critic_with_mean_aggregation_equals_the_plain_mean_loss():
    plain, aggregated = _agent(critic="shared"), _agent(critic="shared", aggregate_critic=True)
    for step in range(3):
        plain.update(_batch(step), step)
        aggregated.update(_batch(step), step)
    for p, q in zip(plain.critic.parameters(), aggregated.critic.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_per_task_critics_do_not_see_the_shared_path():
    # the default is unchanged: per-task critics, no critic aggregator
    agent = _agent()
    assert agent.critic_aggregator is None and agent.critic.weights[0].shape[:2] == (T, 2)


# -- task_input: none ----------------------------------------------------------------------
def test_task_input_none_drops_the_one_hot_columns():
    agent = _agent(task_input="none", critic="shared")
    assert agent.actor.trunk[0].shape[0] == OBS_RAW
    assert agent.critic.weights[0].shape[-2] == OBS_RAW + A
    obs = _batch()["obs"][0]  # all rows carry task 0's one-hot
    other = obs.clone()
    other[:, OBS_RAW:] = torch.eye(T)[2]
    assert torch.equal(agent.act(obs, deterministic=True), agent.act(other, deterministic=True))
    with_id = _agent(task_input="onehot")
    assert with_id.actor.trunk[0].shape[0] == OBS
    assert not torch.equal(with_id.act(obs, deterministic=True), with_id.act(other, deterministic=True))


def test_task_input_none_keeps_the_head_choice_of_a_multi_head_actor():
    agent = _agent(task_input="none", multi_head=True)
    obs = _batch()["obs"][0]
    other = obs.clone()
    other[:, OBS_RAW:] = torch.eye(T)[2]
    assert not torch.equal(agent.act(obs, deterministic=True), agent.act(other, deterministic=True))


# -- temperature: shared -------------------------------------------------------------------
def test_shared_temperature_is_one_parameter_whose_loss_is_the_task_mean():
    agent = _agent(temperature="shared", init_temperature=0.5)
    assert agent.log_alpha.shape == (1,)
    out = agent.update(_batch(), step=0)
    # loss = mean_t alpha c_t, so d loss / d log alpha = mean_t (alpha c_t) = mean of the per-task losses
    torch.testing.assert_close(agent.log_alpha.grad, out["alpha_loss"].mean().reshape(1))
    assert out["alpha"].shape == (T,) and torch.equal(out["alpha"], out["alpha"][0].expand(T))


def test_per_task_temperatures_get_their_own_loss():
    agent = _agent(init_temperature=0.5)
    out = agent.update(_batch(), step=0)
    torch.testing.assert_close(agent.log_alpha.grad, out["alpha_loss"])


def test_aggregated_shared_temperature_sees_its_per_task_gradients():
    agent = _agent("cagrad", temperature="shared", aggregate_temperature=True)
    seen = _capture(agent.temperature_aggregator)
    out = agent.update(_batch(), step=0)
    matrix, _ = seen[0]
    assert matrix.shape == (T, 1)
    torch.testing.assert_close(matrix[:, 0], out["alpha_loss"])  # d(alpha c_t)/d log alpha = alpha c_t
    mean_agent = _agent("mean", temperature="shared", aggregate_temperature=True)
    out = mean_agent.update(_batch(), step=0)
    torch.testing.assert_close(mean_agent.log_alpha.grad, out["alpha_loss"].mean().reshape(1))


def test_aggregated_per_task_temperatures_each_get_their_own_gradient():
    """Per-task temperatures through the aggregator: row t of the [T, T] matrix is task t's
    gradient on log α_t alone (diagonal), and ``mean``'s direction times T gives each log α_t
    its own task's gradient, the per-task losses' (as without aggregation)."""
    agent = _agent("mean", aggregate_temperature=True, init_temperature=0.5)
    seen = _capture(agent.temperature_aggregator)
    out = agent.update(_batch(), step=0)
    matrix, _ = seen[0]
    torch.testing.assert_close(matrix, torch.diag(out["alpha_loss"]))
    torch.testing.assert_close(agent.log_alpha.grad, out["alpha_loss"])


def test_shared_critic_with_a_loss_weighting_descends_the_weighted_loss():
    """A shared critic with a loss weighting on the critics (UW: w_t = ½ at the start) takes
    one backward of Σ_t w_t L_t: T/2 times the plain shared critic's mean-loss gradient (the
    per-task critics' factor T applies to per-task critics only)."""
    weighted, plain = _agent("uw", critic="shared", aggregate_critic=True), _agent(critic="shared")
    weighted.update(_batch(), step=1), plain.update(_batch(), step=1)  # step 1: no actor update
    for p, q in zip(weighted.critic.parameters(), plain.critic.parameters()):
        torch.testing.assert_close(p.grad, 0.5 * T * q.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("critic", ["shared", "per_task"])
def test_grad_clip_reaches_the_aggregated_critic_step(critic):
    """``grad_clip`` also clips the critic step whose gradient the aggregator wrote (shared critic:
    the per-task rows through CAGrad). Adam's first moment after one step is (1 − β1)·g, so it
    shows the clipped gradient: norm ≤ clip·(1 − β1) (clip 1e-3, far below the raw norm)."""
    clip = 1e-3
    agent = _agent("cagrad", critic=critic, aggregate_critic=True, grad_clip=clip)
    unclipped = _agent("cagrad", critic=critic, aggregate_critic=True)
    agent.update(_batch(), step=1), unclipped.update(_batch(), step=1)
    moment = torch.cat([agent.critic_opt.state[p]["exp_avg"].reshape(-1) for p in agent.critic.parameters()])
    raw = torch.cat([p.grad.reshape(-1) for p in unclipped.critic.parameters()])
    assert float(raw.norm()) > 100 * clip  # the same update's gradient without the clip
    assert float(moment.norm()) <= clip * 0.1 * (1 + 1e-5)


# -- log-probability clamp -----------------------------------------------------------------
def test_log_prob_clamp_caps_the_jacobian_at_log_epsilon():
    mean = torch.tensor([[30.0, -30.0]])  # tanh saturates to exactly ±1 in float32
    log_std, eps = torch.full((1, 2), -1.0), torch.tensor([[0.3, -0.2]])
    gauss = (-0.5 * eps ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum()
    _, clamped = squashed_sample(mean, log_std, eps, 1e-6)
    torch.testing.assert_close(clamped[0], gauss - 2 * math.log(1e-6))
    _, exact = squashed_sample(mean, log_std, eps)
    u = mean + log_std.exp() * eps
    exact_jacobian = (2 * (math.log(2) - u.abs() - torch.log1p(torch.exp(-2 * u.abs())))).sum()
    torch.testing.assert_close(exact[0], gauss - exact_jacobian)
    assert exact[0] > clamped[0] + 50  # the exact form keeps growing with |u|


def test_log_prob_clamp_is_invisible_away_from_saturation():
    g = torch.Generator().manual_seed(0)
    mean, log_std, eps = torch.randn(64, 4, generator=g), -torch.rand(64, 4, generator=g), torch.randn(64, 4, generator=g)
    a, exact = squashed_sample(mean, log_std, eps)
    _, clamped = squashed_sample(mean, log_std, eps, 1e-6)
    # |log(x + 1e-6) - log x| <= 1e-6 / x with x = 1 - a² >= 1 - max a², summed over 4 dimensions
    bound = 4 * 1e-6 / (1 - a.abs().max() ** 2) + 1e-4
    assert (clamped - exact).abs().max() <= bound


def test_agent_uses_the_clamp_in_its_losses():
    out_a = _agent(log_prob_clamp=1e-6, actor_lr=1e-3).update(_batch(), 0)
    out_b = _agent(log_prob_clamp=0.5).update(_batch(), 0)  # a large ε visibly changes log pi
    assert not torch.equal(out_a["entropy"], out_b["entropy"])


# -- initialisation ------------------------------------------------------------------------
def test_xavier_init_is_glorot_uniform_weights_and_zero_biases():
    gen = torch.Generator().manual_seed(0)
    actor = TaskActor(OBS, A, T, [400, 400], generator=gen, init="xavier")
    w = actor.trunk[2]
    bound = math.sqrt(6 / (400 + 400))
    assert w.abs().max() <= bound and w.abs().max() > 0.99 * bound
    # U(-b, b) has std b/sqrt(3); 160k draws put the sample std within 1 % of it
    assert abs(w.std().item() / (bound / math.sqrt(3)) - 1) < 0.01
    assert all(torch.count_nonzero(b) == 0 for b in (actor.trunk[1], actor.trunk[3], actor.head_bias))
    assert actor.head_weight.abs().max() <= math.sqrt(6 / (400 + 2 * A))
    critic = TwinCriticEnsemble(OBS, A, T, [400, 400], generator=gen, init="xavier")
    assert critic.weights[1].abs().max() <= bound and torch.count_nonzero(critic.biases[1]) == 0


def test_torch_init_is_the_nn_linear_default():
    actor = TaskActor(OBS, A, T, [400, 400], generator=torch.Generator().manual_seed(0))
    bound = 1 / math.sqrt(400)
    assert actor.trunk[2].abs().max() <= bound and actor.trunk[3].abs().max() > 0.99 * bound


def test_init_option_reaches_the_agent():
    agent = _agent(init="xavier", critic="shared")
    assert torch.count_nonzero(agent.actor.trunk[1]) == 0 and torch.count_nonzero(agent.critic.biases[0]) == 0


# -- everything together: the CAGrad MT10 learner ------------------------------------------
CAGRAD_RUN = dict(critic="shared", task_input="none", temperature="shared", aggregate_critic=True,
                  aggregate_temperature=True, log_prob_clamp=1e-6, init="xavier")


@pytest.mark.parametrize("name", ["cagrad", "moco"])
def test_state_round_trip_of_the_cagrad_learner_gives_an_identical_next_update(name):
    """CAGrad's MT10 learner, and the same with MoCo (stateful: its tracked gradients y and
    weights λ) on the actor, the critic and the temperature: a restored agent's next update is
    bit-identical, which needs each aggregator's state back."""
    agent = _agent(name, **CAGRAD_RUN)
    for step in range(3):
        agent.update(_batch(step), step)
    raw = io.BytesIO()
    torch.save(agent.state_dict(), raw)
    restored = _agent(name, seed=7, **CAGRAD_RUN)
    restored.load_state_dict(torch.load(io.BytesIO(raw.getvalue()), weights_only=False))
    for key, value in agent.temperature_aggregator.state_dict().items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, restored.temperature_aggregator.state_dict()[key]), key
    out_a, out_b = agent.update(_batch(9), 3), restored.update(_batch(9), 3)
    for key in out_a:
        assert torch.equal(out_a[key], out_b[key]), key


@pytest.mark.parametrize("field, value, words", [
    ("critic", "both", ["agent.critic", "per_task", "shared"]),
    ("task_input", "id", ["agent.task_input", "onehot", "none"]),
    ("temperature", "global", ["agent.temperature", "shared"]),
    ("init", "orthogonal", ["agent.init", "xavier", "torch"]),
    ("log_prob_clamp", 0.0, ["agent.log_prob_clamp", "1e-6"]),
])
def test_bad_option_names_the_field_and_what_is_allowed(field, value, words):
    with pytest.raises(ValueError) as exc:
        MTSACConfig(**{field: value}).validate(T)
    for word in words:
        assert word in str(exc.value)


@pytest.mark.parametrize("saved_with, loaded_into", [(True, False), (False, True)])
def test_temperature_aggregator_state_is_optional_on_either_side(saved_with, loaded_into):
    """The temperature's aggregator state travels only between agents that both aggregate the
    temperature: a state saved with one loads into an agent without one (and the reverse,
    which keeps its own fresh aggregator); everything else (here the actor) still comes back."""
    run = dict(CAGRAD_RUN, aggregate_temperature=saved_with)
    agent = _agent("moco", **run)
    for step in range(2):
        agent.update(_batch(step), step)
    state = agent.state_dict()
    assert (state["temperature_aggregator"] is not None) == saved_with
    restored = _agent("moco", seed=7, **dict(CAGRAD_RUN, aggregate_temperature=loaded_into))
    fresh = None if restored.temperature_aggregator is None else dict(restored.temperature_aggregator.state_dict())
    restored.load_state_dict(state)
    for key, value in agent.actor.state_dict().items():
        assert torch.equal(value, restored.actor.state_dict()[key]), key
    if loaded_into:
        assert restored.temperature_aggregator.state_dict().keys() == fresh.keys()
