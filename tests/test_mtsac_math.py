"""MT-SAC's maths against a direct float64 computation from the SAC formulas (arXiv:1812.05905).

One update of a tiny agent is replayed by hand: the same noise (drawn from a copy of the
agent's generator), the networks' weights copied to float64, the critics evaluated by a plain
loop over tasks and twins, log π from ``torch.distributions``. The agent's gradients (left in
``.grad`` by the update) and its updated parameters must match:

* TD target (eq. 3 and 5, with the minimum of the two target Q-functions of the practical algorithm):
  ``y = r + γ (1 − terminated) (min_j Q̄_j(s', a') − α_t log π(a'|s'))``, a' ~ π(·|s').
  The batch carries ``terminated`` only: a time-limit truncation is stored as not terminal
  (runners/rl/iteration.py, docs/mtsac.md), so such rows bootstrap like the ``terminated = 0`` rows here.
* critic loss per task: ``Σ_j mean_b (Q_j(s, a) − y)²`` (eq. 5 without its ½, as mtrl; Adam ignores the scale).
* tanh-Gaussian log π (Appendix C): ``log N(u; μ, σ) − Σ log(1 − tanh(u)²)``.
* actor loss (eq. 7, reparameterised): ``mean_b (α_t log π(ã|s) − min_j Q_j(s, ã))``, the mean over tasks
  for the ``mean`` aggregator; Q from the critics after this update's critic step.
* temperature (eq. 18, parametrised by log α): ``J(α_t) = mean_b α_t (−log π − H̄)``, one α per task
  (mtrl's form; softlearning's ``−log α (log π + H̄)`` has the same gradient sign, without the α factor).
* Polyak averaging of the targets: ``θ̄ ← (1 − τ) θ̄ + τ θ``.
"""

import copy
import math

import pytest
import torch
from torch.distributions import Normal, TanhTransform, TransformedDistribution

import morl
from morl.agents.rl.mtsac import MTSAC, MTSACConfig
from morl.agents.rl.networks import squashed_sample

T, OBS_RAW, A, B = 3, 4, 2, 8
OBS = OBS_RAW + T
GAMMA, TAU, TARGET_ENTROPY = 0.9, 0.25, -1.5
LR = 1e-3
LOG_ALPHA = [math.log(0.5), 0.0, math.log(2.0)]  # distinct per task: the wrong task's α shows


def _agent(path: str, target_entropy: float = TARGET_ENTROPY, log_prob_clamp: float | None = None) -> MTSAC:
    cfg = MTSACConfig(hidden_sizes=[16, 16], batch_size=T * B, buffer_capacity=100, actor_lr=LR, critic_lr=LR,
                      alpha_lr=LR, gamma=GAMMA, tau=TAU, target_entropy=target_entropy,
                      aggregate="none" if path == "none" else "actor", log_prob_clamp=log_prob_clamp)
    agent = MTSAC(OBS, A, T, cfg, morl.build("mean"), "cpu", seed=0)
    if path == "vmapped":
        agent._plain_mean = False  # per-task gradients -> Mean aggregator -> .grad (the path of every aggregator)
    with torch.no_grad():
        agent.log_alpha.copy_(torch.tensor(LOG_ALPHA))
        # targets differ from the online critics, so using the wrong network (or the wrong τ) shows
        gen = torch.Generator().manual_seed(5)
        for p in agent.critic_target.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return agent


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(T, B, OBS, generator=g)
    obs[..., OBS_RAW:] = torch.eye(T).unsqueeze(1)
    next_obs = obs.clone()
    next_obs[..., :OBS_RAW] += 0.3 * torch.randn(T, B, OBS_RAW, generator=g)
    terminated = torch.zeros(T, B)
    terminated[:, ::3] = 1.0  # 3 of 8 rows per task end an episode
    return {"obs": obs, "action": torch.rand(T, B, A, generator=g) * 2 - 1, "reward": torch.randn(T, B, generator=g),
            "next_obs": next_obs, "terminated": terminated}


def _double(tensors) -> list[torch.Tensor]:
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
    """Reparameterised a = tanh(u), u = μ + σ ε, and log π(a) = log N(u; μ, σ) − Σ log(1 − tanh(u)²);
    with mtrl's clamp ε: − Σ log(max(1 − a², 0) + ε) instead."""
    std = log_std.exp()
    u = mean + std * eps
    a = torch.tanh(u)
    jacobian = torch.log1p(-a ** 2) if clamp is None else torch.log((1 - a ** 2).clamp_min(0) + clamp)
    return a, Normal(mean, std).log_prob(u).sum(-1) - jacobian.sum(-1)


def _reference(agent: MTSAC, batch, eps_next, eps, critic_after, clamp=None):
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
    actor_params = list(actor.parameters())
    task_grads = [torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, actor_params, retain_graph=True)])
                  for loss in actor_losses]
    logp = torch.stack(logps)
    # dJ/dlog α_t of α_t · mean_b(−log π − H̄): α_t · mean_b(−log π − H̄)
    alpha_grad = alpha * (-logp - TARGET_ENTROPY).mean(1)
    return {"critic_loss": torch.stack(critic_loss).detach(), "critic_grads": critic_grads,
            "actor_loss": torch.stack(actor_losses).detach(), "task_grads": torch.stack(task_grads),
            "alpha_grad": alpha_grad, "alpha_loss": alpha_grad, "target": torch.stack(targets), "logp": logp}


def _noise(agent: MTSAC):
    # the update draws ε for the next actions (critic target), then ε for the actor loss
    g = torch.Generator().set_state(agent.generator.get_state())
    return torch.randn(T, B, A, generator=g), torch.randn(T, B, A, generator=g)


def _run(path: str, clamp: float | None = None):
    agent = _agent(path, log_prob_clamp=clamp)
    before = copy.deepcopy(agent)
    batch = _batch()
    eps_next, eps = _noise(agent)
    out = agent.update(batch, step=0)
    return before, agent, out, _reference(before, batch, eps_next, eps, agent.critic, clamp)


def _adam_first_step(p0: torch.Tensor, g: torch.Tensor, lr: float) -> torch.Tensor:
    # Adam's first step (bias-corrected m̂ = g, v̂ = g²): θ − lr g / (|g| + 1e-8)
    return p0.double() - lr * g / (g.abs() + 1e-8)


def _assert_adam_step(p0, p1, g, lr):
    # Where |g| is below 1e-5 the float32 gradient's absolute error (~1e-9) shifts g/|g|;
    # elsewhere the step matches to 1e-2 lr (measured max 1.3e-5 lr). Every step is at most lr.
    expect = _adam_first_step(p0, g, lr)
    big = g.abs() > 1e-5
    torch.testing.assert_close(p1.double()[big], expect[big], rtol=0, atol=1e-2 * lr)
    assert float((p1.double() - p0.double()).abs().max()) <= lr * (1 + 1e-5)


def test_tanh_gaussian_log_prob_matches_torch_distributions():
    # ε spread so that u reaches ±12 (1 − tanh² ~ 1e-10): the stable form must hold there too
    gen = torch.Generator().manual_seed(0)
    mean = torch.randn(64, 3, generator=gen, dtype=torch.float64) * 3
    log_std = torch.randn(64, 3, generator=gen, dtype=torch.float64).clamp(-3, 1)
    eps = torch.randn(64, 3, generator=gen, dtype=torch.float64) * 2
    a, logp = squashed_sample(mean, log_std, eps)
    u = mean + log_std.exp() * eps
    dist = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform()])
    # log_prob(a) would invert tanh (atanh of ±1.0 overflows), so take the Jacobian at u directly
    ref = Normal(mean, log_std.exp()).log_prob(u).sum(-1) + 2 * torch.log(torch.cosh(u)).sum(-1)
    torch.testing.assert_close(a, torch.tanh(u))
    torch.testing.assert_close(logp, ref, rtol=1e-10, atol=1e-9)
    moderate = u.abs().amax(-1) < 4
    torch.testing.assert_close(logp[moderate], dist.log_prob(torch.tanh(u))[moderate].sum(-1), rtol=1e-8, atol=1e-8)
    assert float(u.abs().max()) > 10  # the extreme region was exercised


@pytest.mark.parametrize("path", ["mean_fast", "vmapped", "none"])
@pytest.mark.parametrize("clamp", [None, 0.5])
def test_one_update_matches_the_hand_computed_sac_gradients(path, clamp):
    """clamp 0.5: mtrl's log-prob form with a large ε, so that every log π (the TD target's, the
    actor's and the temperature's) moves visibly (checked below) and each must use it."""
    _, agent, out, ref = _run(path, clamp)
    if clamp is not None:
        exact = _run(path)[3]
        assert float((ref["target"] - exact["target"]).abs().max()) > 0.05
        assert float((ref["logp"] - exact["logp"]).abs().max()) > 0.05
    # Measured errors are <= 10% of each tolerance over 20 agent seeds (critic grads up to 34, actor up to 13).
    # critics: TD target with (1 − terminated), per-task α, target nets; loss Σ_j mean_b (Q_j − y)²
    torch.testing.assert_close(out["critic_loss"].double(), ref["critic_loss"], rtol=1e-5, atol=1e-6)
    for p, g in zip(agent.critic.parameters(), ref["critic_grads"]):
        torch.testing.assert_close(p.grad.double(), g, rtol=1e-4, atol=1e-6)
    # actor: mean over tasks of mean_b(α_t log π − min_j Q_j) with the just-updated critics
    torch.testing.assert_close(out["actor_loss"].double(), ref["actor_loss"], rtol=1e-5, atol=1e-6)
    mean_grad = ref["task_grads"].mean(0)
    flat = torch.cat([p.grad.reshape(-1) for p in agent.actor.parameters()]).double()
    torch.testing.assert_close(flat, mean_grad, rtol=1e-4, atol=1e-6)
    # temperatures: one gradient per task, from the actor step's log π
    torch.testing.assert_close(out["entropy"].double(), -ref["logp"].mean(1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(agent.log_alpha.grad.double(), ref["alpha_grad"], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(out["alpha_loss"].double(), ref["alpha_loss"], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("path", ["mean_fast", "vmapped"])
def test_updated_parameters_are_one_adam_step_along_the_hand_gradients(path):
    before, agent, _, ref = _run(path)
    for p0, p1, g in zip(before.critic.parameters(), agent.critic.parameters(), ref["critic_grads"]):
        _assert_adam_step(p0.detach(), p1.detach(), g, LR)
    offset = 0
    for p0, p1 in zip(before.actor.parameters(), agent.actor.parameters()):
        g = ref["task_grads"].mean(0)[offset:offset + p0.numel()].view_as(p0)
        offset += p0.numel()
        _assert_adam_step(p0.detach(), p1.detach(), g, LR)
    _assert_adam_step(before.log_alpha.detach(), agent.log_alpha.detach(), ref["alpha_grad"], LR)


def test_per_task_actor_gradients_match_the_hand_computation():
    """The [T, D] matrix every non-mean aggregator receives: row t = ∇ of task t's own actor loss."""
    agent = _agent("vmapped")
    batch = _batch()
    gen = torch.Generator().manual_seed(3)
    eps = torch.randn(T, B, A, generator=gen)
    alpha = agent.log_alpha.detach().exp()
    ref = _reference(agent, batch, torch.zeros(T, B, A), eps, agent.critic)  # critic_after = current critics
    losses, grads, logp = agent._actor_task_grads(batch["obs"], eps, alpha)
    torch.testing.assert_close(losses.double(), ref["actor_loss"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads.double(), ref["task_grads"], rtol=1e-4, atol=1e-6)
    # the task rows really differ (per-task α and critics), so a mixed-up task index would show
    assert float((ref["task_grads"][0] - ref["task_grads"][2]).norm()) > 0.1 * float(ref["task_grads"][0].norm())


@pytest.mark.parametrize("target_entropy", [TARGET_ENTROPY, -100.0])
def test_temperature_gradient_sign_follows_the_entropy_gap(target_entropy):
    """Entropy below the target -> ∂J/∂log α < 0 -> α grows; above -> α shrinks (eq. 18).

    The fresh actor's entropy is -14 to -13 per task: below H̄ = -1.5, above H̄ = -100.
    """
    agent = _agent("mean_fast", target_entropy)
    out = agent.update(_batch(), step=0)
    gap = out["entropy"].double() - target_entropy  # mean_b(−log π) − H̄
    assert torch.all(gap < -5) if target_entropy > -14 else torch.all(gap > 5)
    alpha = torch.tensor(LOG_ALPHA, dtype=torch.float64).exp()
    torch.testing.assert_close(agent.log_alpha.grad.double(), alpha * gap, rtol=1e-5, atol=1e-7)
    moved = agent.log_alpha.detach().double() - torch.tensor(LOG_ALPHA, dtype=torch.float64)
    assert torch.equal(torch.sign(moved), torch.sign(-gap))  # one Adam step: lr · sign(−grad)
    torch.testing.assert_close(moved.abs(), torch.full((T,), LR, dtype=torch.float64), rtol=1e-4, atol=0)


def test_terminated_rows_do_not_bootstrap():
    """Rows with terminated = 1 regress on r alone: the TD target ignores s' there (and only there)."""
    ref = _run("mean_fast")[3]
    batch = _batch()
    done = batch["terminated"].bool()
    torch.testing.assert_close(ref["target"][done], batch["reward"][done].double())
    assert float((ref["target"][~done] - batch["reward"][~done].double()).abs().min()) > 1e-3
    # and the agent agrees: moving s' of terminated rows leaves its critic gradients unchanged
    moved = _batch()
    moved["next_obs"][..., :OBS_RAW] += 3.0 * batch["terminated"].unsqueeze(-1)
    a, b = _agent("mean_fast"), _agent("mean_fast")
    a.update(batch, 0)
    b.update(moved, 0)
    for pa, pb in zip(a.critic.parameters(), b.critic.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-5, atol=1e-7)


def test_polyak_target_update():
    before, agent, _, _ = _run("mean_fast")
    for old, online, new in zip(before.critic_target.parameters(), agent.critic.parameters(),
                                agent.critic_target.parameters()):
        expect = (1 - TAU) * old.double() + TAU * online.detach().double()
        torch.testing.assert_close(new.double(), expect, rtol=0, atol=1e-6)
