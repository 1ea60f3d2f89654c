"""MT-SAC (agents/rl/mtsac.py): the SAC maths against hand formulas, per-task critics and
temperatures, aggregation through the actor, the literature's options, state round trips, NaN.

The maths (arXiv:1812.05905): one update of a tiny agent is replayed by hand in float64: the
same noise (drawn from a copy of the agent's generator), the networks' weights copied, the
critics evaluated by a plain loop over tasks and twins, log π from ``torch.distributions``.

* TD target (eq. 3 and 5, with the minimum of the two target Q-functions of the practical algorithm):
  ``y = r + γ (1 − terminated) (min_j Q̄_j(s', a') − α_t log π(a'|s'))``, a' ~ π(·|s').
  The batch carries ``terminated`` only: a time-limit truncation is stored as not terminal
  (runners/rl/iteration.py, tests/runners/rl/test_iteration.py).
* critic loss per task: ``Σ_j mean_b (Q_j(s, a) − y)²`` (eq. 5 without its ½, as mtrl; Adam ignores the scale).
* actor loss (eq. 7, reparameterised): ``mean_b (α_t log π(ã|s) − min_j Q_j(s, ã))``, the mean over tasks
  for the ``mean`` aggregator; Q from the critics after this update's critic step.
* temperature (eq. 18, parametrised by log α): ``J(α_t) = mean_b α_t (−log π − H̄)``, one α per task
  (mtrl's form; softlearning's ``−log α (log π + H̄)`` has the same gradient sign, without the α factor).
* Polyak averaging of the targets: ``θ̄ ← (1 − τ) θ̄ + τ θ``.
"""

import copy
import gc
import io
import math

import numpy as np
import pytest
import torch
from torch.distributions import Normal

import morl
from morl.agents.rl.mtsac import MTSAC, MTSACConfig, _conflict_stats
from morl.agents.rl.networks import squashed_sample
from morl.agents.rl.replay import MultiTaskReplay
from morl.envs import evaluate_policy, make_env

T, OBS_RAW, A, B = 3, 5, 2, 16
OBS = OBS_RAW + T


def _cfg(**kw):
    base = dict(
        hidden_sizes=[32, 32], batch_size=T * B, buffer_capacity=1000, actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3
    )
    base.update(kw)
    return MTSACConfig(**base)


def _agent(aggregator="mean", seed=0, **kw):
    agg = aggregator if isinstance(aggregator, morl.Aggregator) else morl.build(aggregator)
    return MTSAC(OBS, A, T, _cfg(**kw), agg, "cpu", seed)


def _batch(seed=0, b=B):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, b, OBS, generator=g)
    obs[..., OBS_RAW:] = torch.eye(T).unsqueeze(1)  # row t = task t, its one-hot at the end
    next_obs = obs.clone()
    next_obs[..., :OBS_RAW] += 0.3 * torch.randn(T, b, OBS_RAW, generator=g)
    terminated = torch.zeros(T, b)
    terminated[:, ::3] = 1.0  # a third of the rows end an episode
    return {
        "obs": obs,
        "action": torch.rand(T, b, A, generator=g) * 2 - 1,
        "reward": torch.randn(T, b, generator=g),
        "next_obs": next_obs,
        "terminated": terminated,
    }


def _params(module):
    return [p.detach().clone() for p in module.parameters()]


def _first_moments(opt, params):
    return [opt.state[p]["exp_avg"] / 0.1 for p in params]  # = the step's gradient after one Adam step


def _capture(module):
    seen = []
    module.register_forward_hook(lambda m, args, out: seen.append([a.detach().clone() for a in args]))
    return seen


# -- the SAC maths against a hand computation ----------------------------------------------------
GAMMA, TAU, TARGET_ENTROPY, LR, HB = 0.9, 0.25, -1.5, 1e-3, 8
LOG_ALPHA = [math.log(0.5), 0.0, math.log(2.0)]  # distinct per task: the wrong task's α shows
# path -> (aggregate, multi_head, one backward): the aggregators that need no gradients take one
# backward of their weighted loss; "per_task" forces the [T, D] matrix through Mean.
PATHS = {
    "one_backward": ("actor", False, True),
    "per_task": ("actor", False, False),
    "none": ("none", False, True),
    "trunk": ("actor_trunk", True, False),
}


def _math_agent(path, target_entropy=TARGET_ENTROPY, clamp=None):
    aggregate, multi_head, one_backward = PATHS[path]
    agent = _agent(
        "mean",
        hidden_sizes=[16, 16],
        batch_size=T * HB,
        gamma=GAMMA,
        tau=TAU,
        target_entropy=target_entropy,
        aggregate=aggregate,
        multi_head=multi_head,
        log_prob_clamp=clamp,
    )
    agent._one_backward = one_backward
    with torch.no_grad():
        agent.log_alpha.copy_(torch.tensor(LOG_ALPHA))
        # targets differ from the online critics, so using the wrong network (or the wrong τ) shows
        gen = torch.Generator().manual_seed(5)
        for p in agent.critic_target.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return agent


def _double(tensors):
    return [p.detach().to(torch.float64).clone().requires_grad_(True) for p in tensors]


def _q(weights, biases, t, j, obs, act):
    """Q_{j,t}(s, a) of task t's twin j: a plain MLP loop, independent of the batched ensemble."""
    x = torch.cat([obs, act], -1)
    for i, (w, b) in enumerate(zip(weights, biases)):
        x = x @ w[t, j] + b[t, j, 0]
        if i < len(weights) - 1:
            x = torch.relu(x)
    return x.squeeze(-1)


def _min_q(weights, biases, t, obs, act):
    return torch.minimum(_q(weights, biases, t, 0, obs, act), _q(weights, biases, t, 1, obs, act))


def _tanh_gaussian(mean, log_std, eps, clamp=None):
    """a = tanh(u), u = μ + σ ε, log π(a) = log N(u; μ, σ) − Σ log(1 − tanh(u)²) (mtrl's clamp: log(max(1 − a², 0) + ε))."""
    std = log_std.exp()
    u = mean + std * eps
    a = torch.tanh(u)
    jacobian = torch.log1p(-(a**2)) if clamp is None else torch.log((1 - a**2).clamp_min(0) + clamp)
    return a, Normal(mean, std).log_prob(u).sum(-1) - jacobian.sum(-1)


def _reference(agent, batch, eps_next, eps, critic_after, clamp=None):
    """Hand computation of one update's gradients from the pre-update agent (float64)."""
    actor = copy.deepcopy(agent.actor).double()
    cw, cb = _double(agent.critic.weights), _double(agent.critic.biases)
    tw, tb = _double(agent.critic_target.weights), _double(agent.critic_target.biases)
    aw, ab = [w.detach().double() for w in critic_after.weights], [b.detach().double() for b in critic_after.biases]
    alpha = torch.tensor(LOG_ALPHA, dtype=torch.float64).exp()
    b64 = {k: v.double() for k, v in batch.items()}
    eye = torch.eye(T, dtype=torch.float64)
    critic_loss, actor_losses, logps, targets = [], [], [], []
    for t in range(T):
        with torch.no_grad():
            mean, log_std = actor(b64["next_obs"][t], eye[t])
            a_next, logp_next = _tanh_gaussian(mean, log_std, eps_next[t].double(), clamp)
            soft_v = _min_q(tw, tb, t, b64["next_obs"][t], a_next) - alpha[t] * logp_next
            y = b64["reward"][t] + GAMMA * (1 - b64["terminated"][t]) * soft_v
        targets.append(y)
        critic_loss.append(sum(((_q(cw, cb, t, j, b64["obs"][t], b64["action"][t]) - y) ** 2).mean() for j in range(2)))
        mean, log_std = actor(b64["obs"][t], eye[t])
        act, logp = _tanh_gaussian(mean, log_std, eps[t].double(), clamp)
        actor_losses.append((alpha[t] * logp - _min_q(aw, ab, t, b64["obs"][t], act)).mean())
        logps.append(logp.detach())
    critic_grads = torch.autograd.grad(sum(critic_loss), [*cw, *cb])
    task_grads = [
        torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(actor.parameters()), retain_graph=True)])
        for loss in actor_losses
    ]
    logp = torch.stack(logps)
    alpha_grad = alpha * (-logp - agent.target_entropy).mean(1)  # dJ/dlog α_t = α_t mean_b(−log π − H̄)
    return {
        "critic_loss": torch.stack(critic_loss).detach(),
        "critic_grads": critic_grads,
        "actor_loss": torch.stack(actor_losses).detach(),
        "task_grads": torch.stack(task_grads),
        "alpha_grad": alpha_grad,
        "target": torch.stack(targets),
        "logp": logp,
    }


def _run(path, clamp=None):
    agent = _math_agent(path, clamp=clamp)
    before = copy.deepcopy(agent)
    batch = _batch(1, HB)
    g = torch.Generator().set_state(agent.generator.get_state())  # ε for the TD target, then for the actor loss
    eps_next, eps = torch.randn(T, HB, A, generator=g), torch.randn(T, HB, A, generator=g)
    out = agent.update(batch, step=0)
    return before, agent, out, _reference(before, batch, eps_next, eps, agent.critic, clamp)


def _assert_adam_step(p0, p1, g, lr):
    # Adam's first step is θ − lr g / (|g| + 1e-8). Where |g| is below 1e-5 the float32 gradient's
    # absolute error (~1e-9) shifts g/|g|; elsewhere it matches to 1e-2 lr. Every step is at most lr.
    expect = p0.double() - lr * g / (g.abs() + 1e-8)
    big = g.abs() > 1e-5
    torch.testing.assert_close(p1.double()[big], expect[big], rtol=0, atol=1e-2 * lr)
    assert float((p1.double() - p0.double()).abs().max()) <= lr * (1 + 1e-5)


@pytest.mark.parametrize(
    "path, clamp",
    [
        ("one_backward", None),
        ("per_task", None),
        ("none", None),
        ("trunk", None),
        ("one_backward", 0.5),
        ("per_task", 0.5),
    ],
)
def test_one_update_matches_the_hand_computed_sac_gradients(path, clamp):
    """clamp 0.5: mtrl's log-prob form with a large ε, so that every log π (the TD target's, the
    actor's and the temperature's) moves visibly (checked below) and each must use it."""
    before, agent, out, ref = _run(path, clamp)
    if clamp is not None:
        exact = _run(path)[3]
        assert float((ref["target"] - exact["target"]).abs().max()) > 0.05
        assert float((ref["logp"] - exact["logp"]).abs().max()) > 0.05
    # critics: TD target with (1 − terminated), per-task α, target nets; loss Σ_j mean_b (Q_j − y)²
    torch.testing.assert_close(out["critic_loss"].double(), ref["critic_loss"], rtol=1e-5, atol=1e-6)
    for p, g in zip(agent.critic.parameters(), ref["critic_grads"]):
        torch.testing.assert_close(p.grad.double(), g, rtol=1e-4, atol=1e-6)
    # actor: the mean over tasks of mean_b(α_t log π − min_j Q_j) with the just-updated critics
    torch.testing.assert_close(out["actor_loss"].double(), ref["actor_loss"], rtol=1e-5, atol=1e-6)
    flat = torch.cat([p.grad.reshape(-1) for p in agent.actor.parameters()]).double()
    torch.testing.assert_close(flat, ref["task_grads"].mean(0), rtol=1e-4, atol=1e-6)
    if path in ("one_backward", "per_task"):  # the conflict statistics see the hand per-task gradients
        torch.testing.assert_close(out["grad_norm_task"].double(), ref["task_grads"].norm(dim=1), rtol=1e-4, atol=1e-6)
    if path != "none":
        torch.testing.assert_close(out["agg_weights"], torch.full((T,), 1 / T))
    # temperatures: one gradient per task, from the actor step's log π
    torch.testing.assert_close(out["entropy"].double(), -ref["logp"].mean(1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(agent.log_alpha.grad.double(), ref["alpha_grad"], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(out["alpha_loss"].double(), ref["alpha_grad"], rtol=1e-5, atol=1e-7)
    # the parameters moved by one Adam step along those gradients; the targets by Polyak averaging
    for p0, p1, g in zip(before.critic.parameters(), agent.critic.parameters(), ref["critic_grads"]):
        _assert_adam_step(p0.detach(), p1.detach(), g, LR)
    flat_before = torch.cat([p.detach().reshape(-1) for p in before.actor.parameters()])
    flat_after = torch.cat([p.detach().reshape(-1) for p in agent.actor.parameters()])
    _assert_adam_step(flat_before, flat_after, ref["task_grads"].mean(0), LR)
    _assert_adam_step(before.log_alpha.detach(), agent.log_alpha.detach(), ref["alpha_grad"], LR)
    for old, online, new in zip(
        before.critic_target.parameters(), agent.critic.parameters(), agent.critic_target.parameters()
    ):
        torch.testing.assert_close(
            new.double(), (1 - TAU) * old.double() + TAU * online.detach().double(), rtol=0, atol=1e-6
        )


def test_per_task_actor_gradients_match_the_hand_computation():
    """The [T, D] matrix every aggregator that needs gradients receives: row t = ∇ of task t's own actor loss."""
    agent = _math_agent("per_task")
    batch = _batch(1, HB)
    eps = torch.randn(T, HB, A, generator=torch.Generator().manual_seed(3))
    ref = _reference(agent, batch, torch.zeros(T, HB, A), eps, agent.critic)  # critic_after = current critics
    losses, grads, _ = agent.kernels.actor_task_grads(batch["obs"], eps, agent.log_alpha.detach().exp())
    torch.testing.assert_close(losses.double(), ref["actor_loss"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads.double(), ref["task_grads"], rtol=1e-4, atol=1e-6)
    # the task rows really differ (per-task α and critics), so a mixed-up task index would show
    assert float((ref["task_grads"][0] - ref["task_grads"][2]).norm()) > 0.1 * float(ref["task_grads"][0].norm())


@pytest.mark.parametrize("target_entropy", [TARGET_ENTROPY, -100.0])
def test_temperature_gradient_sign_follows_the_entropy_gap(target_entropy):
    """Entropy below the target -> ∂J/∂log α < 0 -> α grows; above -> α shrinks (eq. 18).
    The fresh actor's entropy is -14 to -13 per task: below H̄ = -1.5, above H̄ = -100."""
    agent = _math_agent("one_backward", target_entropy)
    out = agent.update(_batch(1, HB), step=0)
    gap = out["entropy"].double() - target_entropy  # mean_b(−log π) − H̄
    assert torch.all(gap < -5) if target_entropy > -14 else torch.all(gap > 5)
    alpha = torch.tensor(LOG_ALPHA, dtype=torch.float64).exp()
    torch.testing.assert_close(agent.log_alpha.grad.double(), alpha * gap, rtol=1e-5, atol=1e-7)
    moved = agent.log_alpha.detach().double() - torch.tensor(LOG_ALPHA, dtype=torch.float64)
    assert torch.equal(torch.sign(moved), torch.sign(-gap))  # one Adam step: lr · sign(−grad)
    torch.testing.assert_close(moved.abs(), torch.full((T,), LR, dtype=torch.float64), rtol=1e-4, atol=0)


def test_terminated_rows_do_not_bootstrap():
    """Rows with terminated = 1 regress on r alone: the TD target ignores s' there (and only there)."""
    ref = _run("one_backward")[3]
    batch = _batch(1, HB)
    done = batch["terminated"].bool()
    torch.testing.assert_close(ref["target"][done], batch["reward"][done].double())
    assert float((ref["target"][~done] - batch["reward"][~done].double()).abs().min()) > 1e-3
    # and the agent agrees: moving s' of terminated rows leaves its critic gradients unchanged
    moved = _batch(1, HB)
    moved["next_obs"][..., :OBS_RAW] += 3.0 * batch["terminated"].unsqueeze(-1)
    a, b = _math_agent("one_backward"), _math_agent("one_backward")
    a.update(batch, 0)
    b.update(moved, 0)
    for pa, pb in zip(a.critic.parameters(), b.critic.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-5, atol=1e-7)


def test_conflict_stats_hand_values():
    # g1 = (0.3, 0.4), g2 = (0, −0.2), g3 = (0.8, 0): norms 0.5, 0.2, 0.8;
    # cos(1,2) = −0.08/0.1 = −0.8, cos(1,3) = 0.24/0.4 = 0.6, cos(2,3) = 0 (orthogonal: not a conflict).
    grads = torch.tensor([[0.3, 0.4], [0.0, -0.2], [0.8, 0.0]], dtype=torch.float64)
    direction = torch.tensor([3.0, 4.0], dtype=torch.float64)
    s = _conflict_stats(grads, direction)
    torch.testing.assert_close(s["grad_norm_task"], torch.tensor([0.5, 0.2, 0.8], dtype=torch.float64))
    assert math.isclose(float(s["grad_norm_pre"]), math.sqrt(1.25) / 3, rel_tol=1e-12)  # ‖(1.1, 0.2)/3‖
    assert float(s["grad_norm_post"]) == 5.0
    assert math.isclose(float(s["grad_cos_min"]), -0.8, rel_tol=1e-12)
    assert math.isclose(float(s["grad_cos_mean"]), (-0.8 + 0.6 + 0.0) / 3, rel_tol=1e-12)
    assert int(s["grad_conflicts"]) == 1
    two = _conflict_stats(grads[:2], direction)
    assert math.isclose(float(two["grad_cos_min"]), -0.8, rel_tol=1e-12) and int(two["grad_conflicts"]) == 1
    one = _conflict_stats(grads[:1], direction)  # one task: no pairs, no cosine statistics
    assert set(one) == {"grad_norm_task", "grad_norm_pre", "grad_norm_post"}


# -- acting, outputs, per-task independence ------------------------------------------------------
def test_act_shapes_bounds_and_determinism():
    agent = _agent()
    obs = _batch()["obs"].reshape(T * B, OBS)
    a = agent.act(obs)
    assert a.shape == (T * B, A) and a.abs().max() <= 1
    assert torch.equal(agent.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    assert not torch.equal(agent.act(obs), agent.act(obs))


def test_multi_head_act_picks_the_head_of_the_one_hot():
    agent = _agent(multi_head=True)
    obs = _batch()["obs"].reshape(T * B, OBS)
    before = agent.act(obs, deterministic=True)
    with torch.no_grad():  # perturb task 2's head only: columns [2 * 2A, 3 * 2A)
        agent.actor.head_weight[:, 2 * 2 * A : 3 * 2 * A] += 1.0
    after = agent.act(obs, deterministic=True)
    task = obs[:, OBS_RAW:].argmax(1)
    assert torch.equal(before[task != 2], after[task != 2])
    assert not torch.equal(before[task == 2], after[task == 2])


def test_update_returns_detached_per_task_tensors():
    out = _agent("cagrad").update(_batch(), step=0)
    for key in ("actor_loss", "critic_loss", "alpha", "alpha_loss", "entropy", "agg_weights", "grad_norm_task"):
        assert out[key].shape == (T,), key
    for key in (
        "grad_norm_pre",
        "grad_norm_post",
        "grad_cos_min",
        "grad_cos_mean",
        "grad_conflicts",
        "nonfinite_updates",
        "nonfinite_streak",
    ):
        assert out[key].shape == (), key
    assert all(not v.requires_grad for v in out.values())
    assert -1 - 1e-6 <= out["grad_cos_min"] <= out["grad_cos_mean"] <= 1 + 1e-6
    assert 0 <= int(out["grad_conflicts"]) <= T * (T - 1) // 2


@pytest.mark.parametrize("aggregator", ["mean", "uw", "cagrad", "moco"])
def test_diagnostics_only_add_the_conflict_statistics(aggregator):
    # aggregators that need no gradients compute the per-task gradients for the statistics only;
    # the others keep the per-task norms (their finite check) and leave out the pairwise statistics
    loud, quiet = _agent(aggregator), _agent(aggregator)
    for step in range(2):
        out_l, out_q = (
            loud.update(_batch(step), step, diagnostics=True),
            quiet.update(_batch(step), step, diagnostics=False),
        )
    assert "grad_cos_min" in out_l and "grad_norm_pre" in out_l
    assert not {"grad_cos_min", "grad_cos_mean", "grad_conflicts", "grad_norm_pre", "grad_norm_post"} & set(out_q)
    if quiet.aggregator.needs_grads:
        torch.testing.assert_close(out_q["grad_norm_task"], out_l["grad_norm_task"], rtol=0, atol=0)
    else:
        assert "grad_norm_task" not in out_q
    assert all(torch.equal(x, y) for x, y in zip(loud.actor.parameters(), quiet.actor.parameters()))


def test_a_task_loss_changes_only_its_own_critic_and_temperature():
    """Changing only task 1's rows of the batch changes only critic 1 and log_alpha[1]'s loss.

    One update: the critic step comes first, so the shared actor has not yet carried task 1's
    data into the other tasks' TD targets (it does from the next update on, as it should).
    """
    a, b = _agent(), _agent()
    batch = _batch()
    other = copy.deepcopy(batch)
    other["reward"][1] += 5.0
    other["obs"][1, :, :OBS_RAW] += 1.0
    out_a, out_b = a.update(batch, 0), b.update(other, 0)
    assert any(not torch.equal(pa[1], pb[1]) for pa, pb in zip(a.critic.parameters(), b.critic.parameters()))
    for pa, pb in zip(a.critic.parameters(), b.critic.parameters()):  # [T, num_q, ...]
        assert torch.equal(pa[[0, 2]], pb[[0, 2]])
    for key in ("critic_loss", "alpha_loss", "entropy"):
        assert torch.equal(out_a[key][[0, 2]], out_b[key][[0, 2]]) and out_a[key][1] != out_b[key][1], key
    assert torch.equal(a.log_alpha[[0, 2]], b.log_alpha[[0, 2]])


def test_target_networks_follow_polyak_only_at_their_frequency():
    agent = _agent(tau=0.1, target_update_freq=2)
    before = _params(agent.critic_target)
    agent.update(_batch(), step=1)  # not a target step
    assert all(torch.equal(x, y) for x, y in zip(before, _params(agent.critic_target)))
    agent.update(_batch(), step=2)
    for old, online, new in zip(before, agent.critic.parameters(), agent.critic_target.parameters()):
        torch.testing.assert_close(new, 0.9 * old + 0.1 * online.detach())


def test_defaults_wired_into_the_agent():
    agent = _agent("mean", log_std_max=0.5)
    assert agent.target_entropy == -A  # SAC's heuristic H̄ = −dim(A) (arXiv:1812.05905, §5)
    assert agent.actor.log_std_max == 0.5
    assert not any(p.requires_grad for p in agent.critic_target.parameters())
    assert agent.critic_aggregator is None and agent.critic.weights[0].shape[:2] == (T, 2)  # per-task critics
    out = agent.update(_batch(0), 0)  # diagnostics default on: conflict statistics reported for mean
    assert {"grad_norm_task", "grad_cos_min", "nonfinite_streak"} <= set(out)


def test_a_batch_with_the_wrong_task_count_is_refused():
    with pytest.raises(ValueError, match="batch"):
        _agent("mean").update({k: v[:2] for k, v in _batch(0).items()}, 0)


# -- aggregation ---------------------------------------------------------------------------------
class _FirstTask(morl.Aggregator):
    """d = g_1 (weights e_1), and it keeps what it was given and the losses it saw."""

    def aggregate(self, grads, losses):
        self.seen, self.seen_losses = grads.detach().clone(), losses
        self.weights = torch.zeros(grads.shape[0], dtype=grads.dtype, device=grads.device)
        self.weights[0] = 1.0
        return grads[0]


@pytest.mark.parametrize("mode", ["actor", "actor_trunk"])
def test_the_aggregated_direction_is_what_reaches_the_actor(mode):
    # The aggregator's direction (here task 1's gradient) is written into .grad of exactly the
    # aggregated parameters (all, or the trunk); the heads get the mean over the tasks' gradients.
    agent = _agent(_FirstTask(check_finite="skip"), aggregate=mode, multi_head=True)
    agent.update(_batch(0), 0)
    seen = agent.aggregator.seen
    assert agent.aggregator.seen_losses is not None and agent.aggregator.seen_losses.shape == (T,)
    trunk = set(agent.actor.trunk_parameter_names())
    picked = [(n, p) for n, p in agent.actor.named_parameters() if mode == "actor" or n in trunk]
    assert seen.shape == (T, sum(p.numel() for _, p in picked))
    written = torch.cat([(agent.actor_opt.state[p]["exp_avg"] / 0.1).reshape(-1) for _, p in picked])
    torch.testing.assert_close(written, seen[0], rtol=1e-5, atol=1e-7)
    assert float((seen[0] - seen.mean(0)).norm()) > 0.1 * float(seen[0].norm())  # not the mean


@pytest.mark.parametrize("mode", ["actor", "actor_trunk"])
def test_a_loss_weighting_on_the_actor(mode):
    # UW (w_t = 0.5): the aggregated parameters get Σ_t w_t ∇L_t = 1.5 × the mean-loss gradient,
    # the others (heads, with actor_trunk) the mean-loss gradient; the reported weights are UW's.
    uw, mean = _agent("uw", aggregate=mode, multi_head=True), _agent("mean", aggregate="none", multi_head=True)
    out = uw.update(_batch(0), 0)
    mean.update(_batch(0), 0)
    torch.testing.assert_close(out["agg_weights"], torch.full((T,), 0.5))
    trunk = set(uw.actor.trunk_parameter_names())
    names = [n for n, _ in uw.actor.named_parameters()]
    for n, got, ref in zip(
        names,
        _first_moments(uw.actor_opt, list(uw.actor.parameters())),
        _first_moments(mean.actor_opt, list(mean.actor.parameters())),
    ):
        factor = 1.5 if (mode == "actor" or n in trunk) else 1.0
        torch.testing.assert_close(got, factor * ref, rtol=1e-4, atol=1e-6 * float(ref.abs().max()))


def test_aggregate_none_ignores_the_aggregator():
    a, b = _agent("mgda", aggregate="none"), _agent("mean", aggregate="none")
    a.update(_batch(0), 0)
    b.update(_batch(0), 0)
    assert all(torch.equal(x, y) for x, y in zip(a.actor.parameters(), b.actor.parameters()))


def test_moco_state_persists_across_updates():
    agent = _agent(morl.build("moco"))
    assert agent.aggregator.check_finite == "skip"  # a non-raising copy of the "raise" aggregator
    for step in range(4):
        agent.update(_batch(step), step)
    assert agent.aggregator.k == 4  # one MoCo step per update, never reset
    assert agent.aggregator.y.shape[0] == T and torch.all(agent.aggregator.y.norm(dim=1) > 0)


@pytest.mark.parametrize("check_finite", ["raise", "skip"])
def test_the_agent_trains_its_own_copies_of_the_aggregator(check_finite):
    """The aggregator a user passes is a template: the critic (and temperature) aggregators are
    independent copies (MoCo's tracked y and λ are buffers), and so is the actor's when the
    template raises on non-finite input (the agent needs a non-raising one: no host sync)."""
    template = morl.build("moco", check_finite=check_finite)
    agent = MTSAC(OBS, A, T, _cfg(aggregate_critic=True), template, "cpu", 0)
    for step in range(2):
        agent.update(_batch(step), step)
    actor, critic = agent.aggregator, agent.critic_aggregator
    assert (actor is template) == (check_finite == "skip") and critic is not actor
    if check_finite == "raise":
        assert template.y is None and template.lam is None  # never called
    assert actor.y.shape != critic.y.shape  # actor vs critic gradients: separate buffers


# -- critics: per task, shared, aggregated -------------------------------------------------------
def test_aggregated_critic_with_mgda_weights_tasks_by_inverse_squared_norm():
    # The critic rows are block diagonal (task t's gradient in critic t's block), i.e.
    # orthogonal: their min-norm point has λ_t = ‖g_t‖⁻² / Σ_s ‖g_s‖⁻², and the update writes
    # T·λ_t·g_t into critic t. Seen through exp_avg = 0.1·grad after the first step.
    agg, plain = _agent("mgda", aggregate_critic=True), _agent("mgda")
    agg.update(_batch(0), 0)
    plain.update(_batch(0), 0)
    g = _first_moments(plain.critic_opt, list(plain.critic.parameters()))
    sq = torch.stack([sum(x[t].double().pow(2).sum() for x in g) for t in range(T)])
    lam = (1 / sq) / (1 / sq).sum()
    assert float(lam.max() / lam.min()) > 1.2  # unequal weights: not the mean
    for p, x in zip(agg.critic.parameters(), g):
        got = agg.critic_opt.state[p]["exp_avg"] / 0.1
        for t in range(T):
            torch.testing.assert_close(got[t].double(), T * lam[t] * x[t].double(), rtol=2e-4, atol=1e-9)


@pytest.mark.parametrize("aggregator, w", [("uw", 0.5), ("mean", 1 / T)])
def test_an_aggregator_without_gradients_on_the_critics_scales_critic_t_by_T_w_t(aggregator, w):
    # One backward of T·Σ w_t L_t gives critic t the gradient T·w_t·∇L_t (what the [T, D] path of
    # the same weights would give): UW starts at w_t = 1/(2σ²) = 0.5; mean gives each critic its own gradient.
    agg, plain = _agent(aggregator, aggregate_critic=True), _agent("mean")
    agg.update(_batch(0), 0)
    plain.update(_batch(0), 0)
    torch.testing.assert_close(agg.critic_aggregator.weights, torch.full((T,), w))
    for got, ref in zip(
        _first_moments(agg.critic_opt, list(agg.critic.parameters())),
        _first_moments(plain.critic_opt, list(plain.critic.parameters())),
    ):
        for t in range(T):
            torch.testing.assert_close(got[t], T * w * ref[t], rtol=1e-4, atol=1e-6 * float(ref.abs().max()))


def _mlp_q(weights, biases, j, x):
    """Q-network j of a shared critic, written out layer by layer (weights [1, 2, in, out])."""
    for i, (w, b) in enumerate(zip(weights, biases)):
        x = x @ w[0, j] + b[0, j, 0]
        if i < len(weights) - 1:
            x = torch.relu(x)
    return x.squeeze(-1)


def test_shared_critic_is_one_twin_pair_over_all_tasks():
    agent = _agent(critic="shared")
    assert all(w.shape[:2] == (1, 2) for w in agent.critic.weights)
    assert T * sum(p.numel() for p in agent.critic.parameters()) == sum(p.numel() for p in _agent().critic.parameters())


def test_shared_critic_losses_go_through_the_aggregator_one_row_per_task():
    # gamma = 0: the TD target is the reward, so task t's loss is a hand formula of the critic alone
    agent = _agent("cagrad", critic="shared", aggregate_critic=True, gamma=0.0, task_input="none")
    seen = _capture(agent.critic_aggregator)
    weights = [w.detach().clone().requires_grad_(True) for w in agent.critic.weights]
    biases = [b.detach().clone().requires_grad_(True) for b in agent.critic.biases]
    batch = _batch()
    agent.update(batch, step=0)
    matrix, losses = seen[0]
    assert matrix.shape == (T, sum(p.numel() for p in agent.critic.parameters()))
    names = [f"weights.{i}" for i in range(len(weights))] + [f"biases.{i}" for i in range(len(biases))]
    for t in range(T):
        x = torch.cat([batch["obs"][t, :, :OBS_RAW], batch["action"][t]], dim=-1)
        loss = sum(((_mlp_q(weights, biases, j, x) - batch["reward"][t]) ** 2).mean() for j in range(2))
        by_name = dict(zip(names, torch.autograd.grad(loss, [*weights, *biases])))
        expected = torch.cat([by_name[n].reshape(-1) for n, _ in agent.critic.named_parameters()])
        torch.testing.assert_close(matrix[t], expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(losses[t], loss.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("aggregator, w", [("uw", 0.5), ("mean", 1 / T)])
def test_shared_critic_with_an_aggregator_without_gradients_descends_the_weighted_loss(aggregator, w):
    """One backward of Σ_t w_t L_t: T·w_t times the plain shared critic's mean-loss gradient (UW:
    w_t = ½ at the start; mean: the plain gradient itself)."""
    weighted, plain = _agent(aggregator, critic="shared", aggregate_critic=True), _agent(critic="shared")
    weighted.update(_batch(), step=1), plain.update(_batch(), step=1)  # step 1: no actor update
    for p, q in zip(weighted.critic.parameters(), plain.critic.parameters()):
        torch.testing.assert_close(p.grad, w * T * q.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("critic", ["shared", "per_task"])
def test_grad_clip_reaches_the_aggregated_critic_step(critic):
    """``grad_clip`` also clips the critic step whose gradient the aggregator wrote. Adam's first
    moment after one step is (1 − β1)·g: norm ≤ clip·(1 − β1) (clip 1e-3, far below the raw norm)."""
    clip = 1e-3
    agent = _agent("cagrad", critic=critic, aggregate_critic=True, grad_clip=clip)
    unclipped = _agent("cagrad", critic=critic, aggregate_critic=True)
    agent.update(_batch(), step=1), unclipped.update(_batch(), step=1)
    moment = torch.cat([agent.critic_opt.state[p]["exp_avg"].reshape(-1) for p in agent.critic.parameters()])
    raw = torch.cat([p.grad.reshape(-1) for p in unclipped.critic.parameters()])
    assert float(raw.norm()) > 100 * clip  # the same update's gradient without the clip
    assert float(moment.norm()) <= clip * 0.1 * (1 + 1e-5)


@pytest.mark.parametrize("aggregator", ["mean", "pcgrad"])
def test_grad_clip_reaches_every_optimizer(aggregator):
    # after the first Adam step exp_avg = (1 − β1)·g: with grad_clip = 1e-3 its norm over each
    # optimizer's parameters is 0.1·1e-3·‖g‖/(‖g‖ + 1e-6), i.e. 1e-4 when ‖g‖ ≫ 1e-6.
    agent, free = _agent(aggregator, grad_clip=1e-3), _agent(aggregator)
    agent.update(_batch(0), 0)
    free.update(_batch(0), 0)
    for opt, params, ref_opt, ref_params in [
        (agent.critic_opt, list(agent.critic.parameters()), free.critic_opt, list(free.critic.parameters())),
        (agent.actor_opt, list(agent.actor.parameters()), free.actor_opt, list(free.actor.parameters())),
        (agent.alpha_opt, [agent.log_alpha], free.alpha_opt, [free.log_alpha]),
    ]:
        m = torch.stack([opt.state[p]["exp_avg"].norm() for p in params]).norm()
        m_free = torch.stack([ref_opt.state[p]["exp_avg"].norm() for p in ref_params]).norm()
        assert float(m_free) > 1e-3  # unclipped: > 10x the clipped norm, so the clip acts
        assert math.isclose(float(m), 1e-4, rel_tol=1e-3)


# -- task input, temperatures --------------------------------------------------------------------
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
    multi_head = _agent(task_input="none", multi_head=True)  # the one-hot still picks the head
    assert not torch.equal(multi_head.act(obs, deterministic=True), multi_head.act(other, deterministic=True))


def test_shared_temperature_is_one_parameter_whose_loss_is_the_task_mean():
    agent = _agent(temperature="shared", init_temperature=0.5)
    assert agent.log_alpha.shape == (1,)
    out = agent.update(_batch(), step=0)
    # loss = mean_t alpha c_t, so d loss / d log alpha = mean_t (alpha c_t) = mean of the per-task losses
    torch.testing.assert_close(agent.log_alpha.grad, out["alpha_loss"].mean().reshape(1))
    assert out["alpha"].shape == (T,) and torch.equal(out["alpha"], out["alpha"][0].expand(T))


@pytest.mark.parametrize("aggregator", ["cagrad", "mean"])
def test_aggregated_shared_temperature_sees_its_per_task_gradients(aggregator):
    agent = _agent(aggregator, temperature="shared", aggregate_temperature=True)
    seen = _capture(agent.temperature_aggregator)
    out = agent.update(_batch(), step=0)
    matrix, _ = seen[0]
    torch.testing.assert_close(matrix, out["alpha_loss"].unsqueeze(1))  # d(alpha c_t)/d log alpha = alpha c_t
    if aggregator == "mean":
        torch.testing.assert_close(agent.log_alpha.grad, out["alpha_loss"].mean().reshape(1))


def test_aggregated_per_task_temperatures_each_get_their_own_gradient():
    """Row t of the [T, T] matrix is task t's gradient on log α_t alone (diagonal), and ``mean``'s
    direction times T gives each log α_t its own task's gradient (as without aggregation)."""
    agent = _agent("mean", aggregate_temperature=True, init_temperature=0.5)
    seen = _capture(agent.temperature_aggregator)
    out = agent.update(_batch(), step=0)
    torch.testing.assert_close(seen[0][0], torch.diag(out["alpha_loss"]))
    torch.testing.assert_close(agent.log_alpha.grad, out["alpha_loss"])


def test_agent_uses_the_log_prob_clamp_in_its_losses():
    out_a = _agent(log_prob_clamp=1e-6).update(_batch(), 0)
    out_b = _agent(log_prob_clamp=0.5).update(_batch(), 0)  # a large ε visibly changes log pi
    assert not torch.equal(out_a["entropy"], out_b["entropy"])


def test_init_option_reaches_the_agent():
    agent = _agent(init="xavier", critic="shared")
    assert torch.count_nonzero(agent.actor.trunk[1]) == 0 and torch.count_nonzero(agent.critic.biases[0]) == 0


# -- state, NaN ----------------------------------------------------------------------------------
CAGRAD_RUN = dict(
    critic="shared",
    task_input="none",
    temperature="shared",
    aggregate_critic=True,
    aggregate_temperature=True,
    log_prob_clamp=1e-6,
    init="xavier",
)


def _round_trip(agent, name, **kw):
    raw = io.BytesIO()
    torch.save(agent.state_dict(), raw)
    restored = _agent(name, seed=123, **kw)
    restored.load_state_dict(torch.load(io.BytesIO(raw.getvalue()), weights_only=False))
    return restored


@pytest.mark.parametrize(
    "name, options",
    [("pcgrad", {}), ("moco", dict(aggregate_critic=True)), ("cagrad", CAGRAD_RUN), ("moco", CAGRAD_RUN)],
)
def test_state_dict_round_trip_gives_identical_next_update(name, options):
    """A restored agent's next update is bit-identical, which needs every aggregator's state back
    (MoCo's tracked y and λ on the actor, the critics and the temperature) and the generator."""
    agent = _agent(name, **options)
    for step in range(3):
        agent.update(_batch(step), step)
    restored = _round_trip(agent, name=name, **options)
    for mine, theirs in [
        (agent.aggregator, restored.aggregator),
        (agent.critic_aggregator, restored.critic_aggregator),
        (agent.temperature_aggregator, restored.temperature_aggregator),
    ]:
        for key, value in ({} if mine is None else mine.state_dict()).items():
            if torch.is_tensor(value):
                assert torch.equal(value, theirs.state_dict()[key]), key
    out_a, out_b = agent.update(_batch(9), 3), restored.update(_batch(9), 3)
    for key in out_a:
        assert torch.equal(out_a[key], out_b[key]), key
    for m in ("actor", "critic", "critic_target"):
        assert all(torch.equal(x, y) for x, y in zip(getattr(agent, m).parameters(), getattr(restored, m).parameters()))
    obs = _batch()["obs"][0]
    assert torch.equal(agent.act(obs), restored.act(obs))


def test_state_round_trip_keeps_the_counters_and_tolerates_missing_parts():
    agent = _agent("moco", **CAGRAD_RUN)
    agent.update(_batch(0), 0)
    agent.nonfinite_updates.fill_(5)
    agent.nonfinite_streak.fill_(2)
    agent.nonfinite_longest.fill_(3)
    restored = _round_trip(agent, name="moco", **CAGRAD_RUN)
    assert (int(restored.nonfinite_updates), int(restored.nonfinite_streak), int(restored.nonfinite_longest)) == (
        5,
        2,
        3,
    )
    old = agent.state_dict()  # a checkpoint from before the streak counters loads with no streak known
    del old["nonfinite_streak"], old["nonfinite_longest"]
    restored.load_state_dict(old)
    assert int(restored.nonfinite_streak) == 0 and int(restored.nonfinite_longest) == 0
    # aggregator states travel only between agents that both have them; the rest still comes back
    plain = _agent("moco", seed=7, **dict(CAGRAD_RUN, aggregate_critic=False, aggregate_temperature=False))
    plain.load_state_dict(agent.state_dict())
    assert plain.critic_aggregator is None and plain.temperature_aggregator is None
    assert all(torch.equal(x, y) for x, y in zip(agent.actor.parameters(), plain.actor.parameters()))
    fresh = _agent("moco", seed=7, **CAGRAD_RUN)
    keys = dict(fresh.temperature_aggregator.state_dict()).keys()
    fresh.load_state_dict(plain.state_dict())
    assert fresh.temperature_aggregator.state_dict().keys() == keys


@pytest.mark.parametrize("field", ["reward", "obs"])
@pytest.mark.parametrize("name", ["mean", "cagrad"])
def test_nan_never_reaches_the_parameters(field, name):
    agent = _agent(name, target_update_freq=2)
    agent.update(_batch(1), step=1)  # Adam has momentum now: a zeroed gradient would still move
    batch = _batch()
    batch[field][1, 3].fill_(float("nan"))
    actor, critic, alpha = _params(agent.actor), _params(agent.critic), agent.log_alpha.detach().clone()
    out = agent.update(batch, step=3)
    assert int(out["nonfinite_updates"]) == 1
    for p in [
        *agent.actor.parameters(),
        *agent.critic.parameters(),
        *agent.critic_target.parameters(),
        agent.log_alpha,
    ]:
        assert torch.isfinite(p).all()
    # the poisoned components skip their step entirely
    assert all(torch.equal(x, y) for x, y in zip(critic, _params(agent.critic)))
    if field == "obs":
        assert all(torch.equal(x, y) for x, y in zip(actor, _params(agent.actor)))
        assert torch.equal(alpha, agent.log_alpha)
    agent.update(_batch(1), step=5)  # a clean batch afterwards trains normally
    assert int(agent.nonfinite_updates) == 1
    assert not all(torch.equal(x, y) for x, y in zip(critic, _params(agent.critic)))


def test_a_refused_temperature_step_counts_as_a_skipped_update():
    # alpha_lr = 1e38: Adam's largest step (~7.27·lr) would overflow float32, so the guard refuses
    # the temperature step; critic and actor still step, and the update is counted as skipped.
    agent = _agent("mean", alpha_lr=1e38)
    actor, alpha = _params(agent.actor), agent.log_alpha.detach().clone()
    out = agent.update(_batch(0), 0)
    assert int(out["nonfinite_updates"]) == 1 and int(out["nonfinite_streak"]) == 1
    assert torch.equal(agent.log_alpha, alpha)
    assert not all(torch.equal(x, y) for x, y in zip(actor, _params(agent.actor)))


def _live_tensors() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


def test_updates_keep_no_autograd_history_and_hold_a_constant_number_of_tensors():
    # The optimizers' max|θ| bound carried from step to step must carry no autograd history (with
    # one, three scalars per optimizer per update chain into an ever-growing graph).
    agent, batch = _agent("cagrad"), _batch()
    for i in range(3):
        agent.update(batch, i, diagnostics=False)
    before = _live_tensors()
    for i in range(3, 13):
        agent.update(batch, i, diagnostics=False)
    assert _live_tensors() == before
    for opt in (agent.actor_opt, agent.critic_opt, agent.alpha_opt):
        assert opt.param_bound is not None and opt.param_bound.grad_fn is None and not opt.param_bound.requires_grad


# -- config --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw",
    [
        dict(hidden_sizes=[1]),
        dict(batch_size=T),
        dict(buffer_capacity=T),
        dict(gamma=0.0),
        dict(gamma=1.0),
        dict(tau=1.0),
        dict(grad_clip=0.5),
    ],
)
def test_boundary_configs_are_valid(kw):
    _cfg(**kw).validate(T)


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(aggregate="critic"), ["agent.aggregate", "actor_trunk"]),
        (dict(batch_size=2), ["batch_size"]),
        (dict(hidden_sizes=[]), ["hidden_sizes"]),
        (dict(hidden_sizes=[8, 0]), ["hidden_sizes"]),
        (dict(gamma=1.5), ["gamma"]),
        (dict(tau=0.0), ["tau"]),
        (dict(grad_clip=0.0), ["grad_clip"]),
        (dict(actor_update_freq=0), ["actor_update_freq"]),
        (dict(target_update_freq=0), ["target_update_freq"]),
        (dict(log_std_min=1.0, log_std_max=1.0), ["log_std_min"]),
        (dict(actor_lr=0.0), ["actor_lr"]),
        (dict(critic="both"), ["agent.critic", "per_task", "shared"]),
        (dict(task_input="id"), ["agent.task_input", "onehot", "none"]),
        (dict(temperature="global"), ["agent.temperature", "shared"]),
        (dict(init="orthogonal"), ["agent.init", "xavier", "torch"]),
        (dict(log_prob_clamp=0.0), ["agent.log_prob_clamp", "1e-6"]),
        (dict(critic_hidden_sizes=[]), ["agent.critic_hidden_sizes"]),
        (dict(reset_every=0), ["agent.reset_every"]),
    ],
)
def test_a_bad_config_names_the_field_and_what_is_allowed(kw, words):
    with pytest.raises(ValueError) as exc:
        _cfg(**kw).validate(T)
    assert all(word in str(exc.value) for word in words), str(exc.value)


@pytest.mark.integration
def test_compiled_update_matches_eager():
    eager, compiled = _agent("cagrad"), _agent("cagrad", compile=True)
    for step in range(3):
        out_e, out_c = eager.update(_batch(step), step), compiled.update(_batch(step), step)
        for key in out_e:
            torch.testing.assert_close(out_c[key], out_e[key], rtol=1e-4, atol=1e-5)
    for x, y in zip(eager.actor.parameters(), compiled.actor.parameters()):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


# -- learning (integration tier) -----------------------------------------------------------------
# The plain collect -> store -> sample -> update loop (random actions during warm-up, one update
# per vector step); every EVAL_EVERY steps a separate evaluation env runs EVAL_EPISODES
# deterministic episodes per task, and the run stops at the first evaluation with mean success
# >= 0.9. Hyperparameters differ from the MT10 recipe only where the tiny env needs it: 2x64
# networks, batch 256, learning rates 1e-3, initial temperature 0.1 (the point_mass reward is ~1
# per step, so alpha = 1 would drown it in entropy bonus). Over seeds 0..9 (mean) and 0..6
# (CAGrad c=0.9) every run reached >= 0.9 mean success by step 750, half the 1500-step budget.
EVAL_EVERY, EVAL_EPISODES, TARGET = 250, 10, 0.9


def train_until_success(
    aggregator, *, num_tasks=4, seed=0, max_steps=1500, warmup=200, first_eval=500, agent_options=None, **options
):
    """Train MT-SAC on point_mass; return the (step, mean success) evaluations until TARGET is met.
    ``options`` go to the aggregator, ``agent_options`` to ``MTSACConfig`` (e.g. ``critic="shared"``)."""
    env = make_env("point_mass", seed=seed, num_tasks=num_tasks)
    eval_env = make_env("point_mass", seed=seed + 10_000, num_tasks=num_tasks, envs_per_task=EVAL_EPISODES, eval=True)
    obs_dim, act_dim = env.single_observation_space.shape[0], env.single_action_space.shape[0]
    cfg = MTSACConfig(
        hidden_sizes=[64, 64],
        batch_size=64 * num_tasks,
        buffer_capacity=50_000,
        actor_lr=1e-3,
        critic_lr=1e-3,
        alpha_lr=1e-3,
        init_temperature=0.1,
        **(agent_options or {}),
    )
    agent = MTSAC(obs_dim, act_dim, num_tasks, cfg, morl.build(aggregator, **options), "cpu", seed)
    replay = MultiTaskReplay(num_tasks, cfg.buffer_capacity // num_tasks, obs_dim, act_dim, "cpu")
    sampler = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    policy = lambda o: agent.act(torch.as_tensor(o), deterministic=True).numpy()  # noqa: E731
    obs, _ = env.reset(seed=seed)
    history = []
    for step in range(max_steps):
        if step < warmup:
            action = rng.uniform(-1, 1, size=(env.num_envs, act_dim)).astype(np.float32)
        else:
            action = agent.act(torch.as_tensor(obs)).numpy()
        next_obs, reward, terminated, _, info = env.step(action)
        replay.add(env.task_ids, obs, action, reward, info["final_obs"], terminated)
        obs = next_obs
        if step >= warmup:
            agent.update(replay.sample(cfg.batch_size // num_tasks, sampler), step)
        if step + 1 >= first_eval and (step + 1) % EVAL_EVERY == 0:
            history.append((step + 1, float(evaluate_policy(eval_env, policy, EVAL_EPISODES)["success"].mean())))
            if history[-1][1] >= TARGET:
                break
    assert int(agent.nonfinite_updates) == 0
    return history


# The literature's learner (docs/mtsac.md, configs/mt10_mtrl/): ONE shared critic and ONE temperature
# whose per-task losses also go through the aggregator, mtrl's log-prob clamp and init. The one-hot
# stays in the inputs: point_mass tasks differ by it alone. Seeds 0-2, mean and CAGrad (c = 0.9):
# every run reached 1.0 by step 750, half the 1500-step budget.
SHARED_LEARNER = dict(
    critic="shared",
    temperature="shared",
    aggregate_critic=True,
    aggregate_temperature=True,
    log_prob_clamp=1e-6,
    init="xavier",
)


@pytest.mark.integration
@pytest.mark.parametrize("aggregator, options", [("mean", {}), ("cagrad", {"c": 0.9})])
def test_mtsac_learns_point_mass(aggregator, options):
    history = train_until_success(aggregator, **options)
    assert history[-1][1] >= TARGET, f"{aggregator}: evaluations (step, mean success) {history}"


@pytest.mark.integration
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "aggregator, options",
    [
        ("mean", {}),
        ("cagrad", {"c": 0.9}),
        ("pcgrad", {}),
        ("moco", {}),
        ("moco", {"base": "cagrad", "base_options": {"c": 0.9}}),
    ],
)
def test_mtsac_learns_point_mass_more_tasks_and_seeds(aggregator, options, seed):
    history = train_until_success(aggregator, num_tasks=8, seed=seed, max_steps=4000, **options)
    assert history[-1][1] >= TARGET, f"{aggregator} seed {seed}: evaluations (step, mean success) {history}"


@pytest.mark.integration
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("aggregator, options", [("mean", {}), ("cagrad", {"c": 0.9})])
def test_shared_critic_learner_learns_point_mass(aggregator, options, seed):
    history = train_until_success(aggregator, seed=seed, agent_options=SHARED_LEARNER, **options)
    assert history[-1][1] >= TARGET, f"{aggregator} seed {seed}: evaluations (step, mean success) {history}"


def test_critic_hidden_sizes_widen_the_critics_only():
    agent = _agent(critic_hidden_sizes=[48, 40])
    assert [tuple(w.shape[-2:]) for w in agent.critic.weights] == [(OBS + A, 48), (48, 40), (40, 1)]
    assert [agent.actor.trunk[i].shape for i in (0, 2)] == [(OBS, 32), (32, 32)]


def test_layer_norm_options_normalise_the_hidden_layers_of_each_network():
    agent = _agent(critic_layer_norm=True)
    assert len(agent.critic.norms) == 4 and len(agent.actor.norms) == 0
    assert len(_agent(actor_layer_norm=True).actor.norms) == 4
    agent.update(_batch(), step=0)  # the gains and shifts are trained like the weights
    gains, shifts = agent.critic.norms[0].detach(), agent.critic.norms[1].detach()
    assert not torch.equal(gains, torch.ones_like(gains)) and not torch.equal(shifts, torch.zeros_like(shifts))


@pytest.mark.parametrize("critic", ["per_task", "shared"])
def test_per_task_actor_gradients_with_layer_norm_match_autograd_task_by_task(critic):
    agent = _agent("pcgrad", critic=critic, critic_layer_norm=True, actor_layer_norm=True)
    obs, eps = _batch()["obs"], torch.randn(T, B, A, generator=torch.Generator().manual_seed(2))
    alpha = torch.tensor([0.1, 0.5, 1.0])
    losses, grads, _ = agent.kernels.actor_task_grads(obs, eps, alpha)
    params = list(agent.actor.parameters())
    for t in range(T):  # the module forward, one task at a time, no vmap
        mean, log_std = agent.actor(obs[t], torch.eye(T)[t])
        act, logp = squashed_sample(mean, log_std, eps[t])
        n = agent.critic.weights[0].shape[0]  # T critics, or the shared one
        q = agent.critic(obs[t].expand(n, -1, -1), act.expand(n, -1, -1))
        loss = (alpha[t] * logp - q[t if critic == "per_task" else 0].amin(0)).mean()
        torch.testing.assert_close(losses[t], loss)
        ref = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])
        torch.testing.assert_close(grads[t], ref, rtol=1e-4, atol=1e-6)


def test_reset_every_reinitialises_the_networks_and_restarts_adam():
    agent = _agent(reset_every=3)
    batch = _batch()
    for step in range(3):
        agent.update(batch, step=step)
    assert agent.actor_opt.state[agent.actor.trunk[0]]["step"] == 3
    before = agent.actor.trunk[0].detach().clone()
    agent.reset_networks(3)
    # a fresh draw (nn.Linear's bound 1/sqrt(fan_in)), not the trained weights; targets = critics again
    assert not torch.equal(agent.actor.trunk[0], before)
    assert float(agent.actor.trunk[0].abs().max()) <= 1 / math.sqrt(OBS)
    for p, q in zip(agent.critic.parameters(), agent.critic_target.parameters()):
        assert torch.equal(p, q)
    assert not agent.actor_opt.state and not agent.critic_opt.state
    agent.update(batch, step=3)  # the update at a multiple of reset_every resets first: Adam restarts at 1
    assert agent.actor_opt.state[agent.actor.trunk[0]]["step"] == 1


def test_resets_are_drawn_from_seed_and_step_so_a_resumed_run_resets_alike():
    a, b = _agent(seed=4), _agent(seed=4)
    a.update(_batch(), step=0)  # different histories, same (seed, step): same fresh networks
    a.reset_networks(10), b.reset_networks(10)
    for p, q in zip([*a.actor.parameters(), *a.critic.parameters()], [*b.actor.parameters(), *b.critic.parameters()]):
        assert torch.equal(p, q)
    c = _agent(seed=4)
    c.reset_networks(20)
    assert not torch.equal(c.actor.trunk[0], a.actor.trunk[0])
