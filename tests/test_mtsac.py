"""MT-SAC unit checks: shapes, per-task independence, temperatures, targets, aggregation, state, NaN."""

import copy
import io

import pytest
import torch

import morl
from morl.agents.rl.mtsac import MTSAC, MTSACConfig, _guard_and_clip

T, OBS_RAW, A, B = 3, 5, 2, 16
OBS = OBS_RAW + T


def _cfg(**kw):
    base = dict(hidden_sizes=[32, 32], batch_size=T * B, buffer_capacity=1000, actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3)
    base.update(kw)
    return MTSACConfig(**base)


def _agent(aggregator="mean", seed=0, **kw):
    agg = aggregator if isinstance(aggregator, morl.Aggregator) else morl.build(aggregator)
    return MTSAC(OBS, A, T, _cfg(**kw), agg, "cpu", seed)


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, B, OBS, generator=g)
    obs[..., OBS_RAW:] = torch.eye(T).unsqueeze(1)  # row t = task t, its one-hot at the end
    next_obs = obs.clone()
    next_obs[..., :OBS_RAW] += 0.1 * torch.randn(T, B, OBS_RAW, generator=g)
    return {
        "obs": obs,
        "action": torch.rand(T, B, A, generator=g) * 2 - 1,
        "reward": torch.randn(T, B, generator=g),
        "next_obs": next_obs,
        "terminated": (torch.rand(T, B, generator=g) < 0.1).float(),
    }




def _params(module):
    return [p.detach().clone() for p in module.parameters()]


def test_act_shapes_bounds_and_determinism():
    agent = _agent()
    obs = _batch()["obs"].reshape(T * B, OBS)
    a = agent.act(obs)
    assert a.shape == (T * B, A) and a.abs().max() <= 1
    assert torch.equal(agent.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    assert not torch.equal(agent.act(obs), agent.act(obs))


def test_update_returns_detached_per_task_tensors():
    out = _agent("cagrad").update(_batch(), step=0)
    for key in ("actor_loss", "critic_loss", "alpha", "alpha_loss", "entropy", "agg_weights", "grad_norm_task"):
        assert out[key].shape == (T,), key
    for key in ("grad_norm_pre", "grad_norm_post", "grad_cos_min", "grad_cos_mean", "grad_conflicts", "nonfinite_updates"):
        assert out[key].shape == (), key
    assert all(not v.requires_grad for v in out.values())
    assert -1 - 1e-6 <= out["grad_cos_min"] <= out["grad_cos_mean"] <= 1 + 1e-6
    assert 0 <= int(out["grad_conflicts"]) <= T * (T - 1) // 2


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
    changed = [not torch.equal(pa[1], pb[1]) for pa, pb in zip(a.critic.parameters(), b.critic.parameters())]
    assert any(changed)
    for pa, pb in zip(a.critic.parameters(), b.critic.parameters()):  # [T, num_q, ...]
        assert torch.equal(pa[[0, 2]], pb[[0, 2]])
    for key in ("critic_loss", "alpha_loss", "entropy"):
        assert torch.equal(out_a[key][[0, 2]], out_b[key][[0, 2]]) and out_a[key][1] != out_b[key][1], key
    assert torch.equal(a.log_alpha[[0, 2]], b.log_alpha[[0, 2]])


def test_temperature_moves_toward_the_target_entropy():
    # target entropy far above what the policy has -> alpha grows; far below -> alpha shrinks
    up, down = _agent(target_entropy=100.0), _agent(target_entropy=-100.0)
    for step in range(3):
        up.update(_batch(step), step)
        down.update(_batch(step), step)
    assert torch.all(up.log_alpha > 0) and torch.all(down.log_alpha < 0)


def test_target_networks_follow_polyak_and_frequency():
    agent = _agent(tau=0.1, target_update_freq=2)
    before = _params(agent.critic_target)
    agent.update(_batch(), step=1)  # not a target step
    assert all(torch.equal(x, y) for x, y in zip(before, _params(agent.critic_target)))
    agent.update(_batch(), step=2)
    for old, online, new in zip(before, agent.critic.parameters(), agent.critic_target.parameters()):
        torch.testing.assert_close(new, 0.9 * old + 0.1 * online.detach())


@pytest.mark.parametrize("mode", ["actor", "actor_trunk"])
@pytest.mark.parametrize("multi_head", [False, True])
def test_mean_aggregator_equals_plain_mean_loss_gradient(mode, multi_head):
    """Per-task grads -> mean -> .grad -> Adam reproduces the plain mean-loss update."""
    agg, plain = _agent(aggregate=mode, multi_head=multi_head), _agent(aggregate="none", multi_head=multi_head)
    for step in range(3):
        agg.update(_batch(step), step)
        plain.update(_batch(step), step)
    for x, y in zip(agg.actor.parameters(), plain.actor.parameters()):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def test_mean_fast_path_equals_the_per_task_path_and_diagnostics_do_not_change_the_update():
    """``mean`` skips the per-task gradients (one mean-loss backward); the vmapped path gives the same update."""
    fast, quiet, vmapped = _agent(), _agent(), _agent()
    vmapped._plain_mean = False  # force per-task gradients -> Mean aggregator -> .grad
    assert fast._plain_mean
    for step in range(3):
        out_f = fast.update(_batch(step), step, diagnostics=True)
        out_q = quiet.update(_batch(step), step, diagnostics=False)
        out_v = vmapped.update(_batch(step), step)
        for key in ("grad_norm_task", "grad_cos_min", "grad_cos_mean", "grad_conflicts", "agg_weights"):
            torch.testing.assert_close(out_f[key], out_v[key], rtol=1e-4, atol=1e-6)
        assert "grad_cos_min" not in out_q and "grad_norm_task" not in out_q
    for f, q, v in zip(fast.actor.parameters(), quiet.actor.parameters(), vmapped.actor.parameters()):
        assert torch.equal(f, q)
        torch.testing.assert_close(f, v, rtol=1e-5, atol=1e-6)


def test_per_task_gradients_match_separate_backward_passes():
    agent = _agent()
    batch = _batch()
    eps = torch.randn(T, B, A)
    alpha = agent.log_alpha.detach().exp()
    losses, grads, logp = agent._actor_task_grads(batch["obs"], eps, alpha)
    for t in range(T):
        params = list(agent.actor.parameters())
        loss, logp_t = agent._actor_task_loss({**dict(agent.actor.named_parameters()),
                                               **{k: v[t] for k, v in agent.critic.per_task_views().items()}},
                                              batch["obs"][t], eps[t], torch.eye(T)[t], alpha[t])
        ref = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])
        torch.testing.assert_close(losses[t], loss.detach())
        torch.testing.assert_close(grads[t], ref, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(logp[t], logp_t)


def test_multi_head_act_picks_the_head_of_the_one_hot():
    agent = _agent(multi_head=True)
    obs = _batch()["obs"].reshape(T * B, OBS)
    before = agent.act(obs, deterministic=True)
    with torch.no_grad():  # perturb task 2's head only: columns [2 * 2A, 3 * 2A)
        agent.actor.head_weight[:, 2 * 2 * A:3 * 2 * A] += 1.0
    after = agent.act(obs, deterministic=True)
    task = obs[:, OBS_RAW:].argmax(1)
    assert torch.equal(before[task != 2], after[task != 2])
    assert not torch.equal(before[task == 2], after[task == 2])


def test_aggregated_critic_with_mean_equals_independent_critics():
    a, b = _agent(aggregate_critic=True), _agent()
    for step in range(2):
        a.update(_batch(step), step)
        b.update(_batch(step), step)
    for x, y in zip(a.critic.parameters(), b.critic.parameters()):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def test_moco_state_persists_across_updates():
    agent = _agent(morl.build("moco"))
    assert agent.aggregator.check_finite == "skip"  # a non-raising copy of the "raise" aggregator
    for step in range(4):
        agent.update(_batch(step), step)
    assert agent.aggregator.k == 4  # one MoCo step per update, never reset
    assert agent.aggregator.y.shape[0] == T and torch.all(agent.aggregator.y.norm(dim=1) > 0)


@pytest.mark.parametrize("name", ["moco", "pcgrad", "cagrad"])
def test_state_dict_round_trip_gives_identical_next_update(name):
    agent = _agent(name, seed=0)
    for step in range(3):
        agent.update(_batch(step), step)
    raw = io.BytesIO()
    torch.save(agent.state_dict(), raw)
    restored = _agent(name, seed=123)
    restored.load_state_dict(torch.load(io.BytesIO(raw.getvalue()), weights_only=False))
    out_a, out_b = agent.update(_batch(9), 3), restored.update(_batch(9), 3)
    for key in out_a:
        assert torch.equal(out_a[key], out_b[key]), key
    for m in ("actor", "critic", "critic_target"):
        assert all(torch.equal(x, y) for x, y in zip(getattr(agent, m).parameters(), getattr(restored, m).parameters()))
    assert torch.equal(agent.act(_batch()["obs"][0]), restored.act(_batch()["obs"][0]))


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
    for p in [*agent.actor.parameters(), *agent.critic.parameters(), *agent.critic_target.parameters(), agent.log_alpha]:
        assert torch.isfinite(p).all()
    # the poisoned components skip their step entirely
    assert all(torch.equal(x, y) for x, y in zip(critic, _params(agent.critic)))
    if field == "obs":
        assert all(torch.equal(x, y) for x, y in zip(actor, _params(agent.actor)))
        assert torch.equal(alpha, agent.log_alpha)
    agent.update(_batch(1), step=5)  # a clean batch afterwards trains normally
    assert int(agent.nonfinite_updates) == 1
    assert not all(torch.equal(x, y) for x, y in zip(critic, _params(agent.critic)))


def test_guard_and_clip_bounds_the_norm_without_sync():
    grads = [torch.full((3,), 4.0), torch.full((2, 2), 3.0)]
    ok, norm = _guard_and_clip(grads, max_norm=1.0)
    assert bool(ok) and torch.isclose(norm, torch.tensor((48.0 + 36.0) ** 0.5))
    assert torch.isclose(torch.stack([g.norm() for g in grads]).norm(), torch.tensor(1.0), atol=1e-5)
    bad = [torch.tensor([1.0, float("inf")])]
    ok, _ = _guard_and_clip(bad, max_norm=None)
    assert not bool(ok) and torch.equal(bad[0], torch.zeros(2))


@pytest.mark.parametrize(
    "kw, match",
    [(dict(aggregate="critic"), "agent.aggregate"), (dict(batch_size=2), "batch_size"),
     (dict(hidden_sizes=[]), "hidden_sizes"), (dict(tau=0.0), "tau"), (dict(grad_clip=-1.0), "grad_clip")],
)
def test_bad_config_names_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        _agent(**kw)


@pytest.mark.slow
def test_compiled_update_matches_eager():
    eager, compiled = _agent("cagrad"), _agent("cagrad", compile=True)
    for step in range(3):
        out_e, out_c = eager.update(_batch(step), step), compiled.update(_batch(step), step)
        for key in out_e:
            torch.testing.assert_close(out_c[key], out_e[key], rtol=1e-4, atol=1e-5)
    for x, y in zip(eager.actor.parameters(), compiled.actor.parameters()):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
