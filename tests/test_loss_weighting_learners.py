"""Learners skip the per-task Jacobian for loss weightings (``needs_grads`` False).

For MT-SAC (actor and aggregated critic), the SB3 adapter's actor step and the supervised
adapter (morl.backward: tests/test_gradients.py): with a loss weighting the per-task gradient
routine is patched to raise, and the parameters after the update equal those of the explicit
path (the same aggregator forced onto the [K, D] matrix: ``weights @ per-task gradients``), in
float64 to 1e-10. Adam's first step is ±lr per entry, so a wrong weight or a missing task
shows up as a full lr difference.
"""

from __future__ import annotations

import pytest
import torch

import morl
from morl.agents.rl import sb3 as sb3_module
from morl.agents.rl.mtsac import MTSAC, MTSACConfig
from morl.agents.supervised import multitask as supervised_module
from morl.agents.supervised.multitask import MultiHeadMLP, MultiTaskLoss, SupervisedMTL, TaskSpec

NAMES = ["uw", "dwa", "famo", "gls", "stch"]
TOL = 1e-10


def _forbidden(*args, **kwargs):
    raise AssertionError("the per-task gradients were computed for a loss weighting")


def _explicit(agg):
    agg.needs_grads = True  # instance attribute: the learner takes the [K, D] path with the same weights
    return agg


def _same(a_params, b_params):
    for a, b in zip(a_params, b_params):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=TOL, atol=TOL)


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


T, OBS_RAW, A, B = 3, 5, 2, 8


def _mtsac(name, explicit, aggregate_critic):
    cfg = MTSACConfig(hidden_sizes=[16, 16], batch_size=T * B, buffer_capacity=100, aggregate_critic=aggregate_critic)
    agent = MTSAC(OBS_RAW + T, A, T, cfg, morl.build(name), "cpu", 0)
    if explicit:
        agent._one_backward = False
        if agent.critic_aggregator is not None:
            _explicit(agent.critic_aggregator)
    return agent


def _mtsac_batch(seed):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, B, OBS_RAW + T, generator=g)
    obs[..., OBS_RAW:] = torch.eye(T).unsqueeze(1)
    return {
        "obs": obs,
        "action": torch.rand(T, B, A, generator=g) * 2 - 1,
        "reward": torch.randn(T, B, generator=g) + 3.0,
        "next_obs": obs + 0.1,
        "terminated": torch.zeros(T, B),
    }


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("aggregate_critic", [False, True])
def test_mtsac_actor_and_critic(name, aggregate_critic, monkeypatch, float64):
    fast, slow = _mtsac(name, False, aggregate_critic), _mtsac(name, True, aggregate_critic)
    assert fast._one_backward and not slow._one_backward
    fast.kernels.actor_task_grads = _forbidden
    monkeypatch.setattr(fast, "_aggregate_critic_grads", _forbidden)
    for step in range(3):
        out_f = fast.update(_mtsac_batch(step), step, diagnostics=False)
        out_s = slow.update(_mtsac_batch(step), step)
        torch.testing.assert_close(out_f["agg_weights"], out_s["agg_weights"], rtol=TOL, atol=TOL)
    assert int(fast.nonfinite_updates) == 0 == int(slow.nonfinite_updates)
    _same(fast.actor.parameters(), slow.actor.parameters())
    _same(fast.critic.parameters(), slow.critic.parameters())


@pytest.mark.parametrize("name", NAMES)
def test_sb3_actor_step(name, monkeypatch, float64):
    from morl.envs import make_env

    models = []
    for explicit in (False, True):
        model = sb3_module.MultiTaskSAC(
            "MlpPolicy", make_env("point_mass", seed=0), aggregator=name, seed=0, policy_kwargs=dict(net_arch=[16, 16])
        )
        model.policy.double()
        for net in (model.actor, model.critic):  # SB3's preprocessing casts to float32; the obs here are flat
            net.extract_features = lambda obs, features_extractor=None: obs
        if explicit:
            _explicit(model.aggregator)
        models.append(model)
    k = models[0].num_tasks
    gen = torch.Generator().manual_seed(0)
    obs = torch.randn(24, models[0].observation_space.shape[-1], generator=gen)
    obs[:, -k:] = torch.eye(k).repeat(24 // k + 1, 1)[:24]
    for model, fast in zip(models, (True, False)):
        params = [p for p in model.actor.parameters() if p.requires_grad]
        with monkeypatch.context() as m:
            if fast:
                m.setattr(sb3_module, "per_task_grads", _forbidden)
            for _ in range(2):
                torch.manual_seed(1)  # the same reparametrised action noise for both models
                actions, logp = model.actor.action_log_prob(obs)
                q = torch.cat(model.critic(obs, actions), dim=1).min(dim=1).values
                per_sample = 0.1 * logp.reshape(-1) - q
                losses = torch.stack([per_sample[obs[:, -k + t] > 0.5].mean() for t in range(k)])
                samples = (obs[:, -k:] > 0.5).sum(dim=0)  # every task present: all rows aggregated
                model._actor_step(losses, params, samples)
    _same(models[0].actor.parameters(), models[1].actor.parameters())


@pytest.mark.parametrize("name", NAMES)
def test_supervised_adapter(name, monkeypatch, float64):
    specs = [TaskSpec("a", "classification", 3), TaskSpec("b", "regression"), TaskSpec("c", "classification", 2)]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(16, 5, generator=gen)
    y = torch.stack(
        [
            torch.randint(0, 3, (16,), generator=gen).double(),
            torch.randn(16, generator=gen),
            torch.randint(0, 2, (16,), generator=gen).double(),
        ],
        1,
    )
    nets = []
    for fast in (True, False):
        torch.manual_seed(0)
        net = MultiHeadMLP(5, [8, 6], specs)
        agg = morl.build(name) if fast else _explicit(morl.build(name))
        adapter = SupervisedMTL(
            net,
            agg,
            torch.optim.Adam(net.parameters(), lr=1e-2),
            shared="trunk",
            loss_fn=MultiTaskLoss(specs),
            task_weights=[1.0, 0.5, 2.0],
        )
        with monkeypatch.context() as m:
            if fast:
                m.setattr(supervised_module, "per_task_grads", _forbidden)
            for _ in range(3):
                out = adapter.step((x, y))
        assert (adapter.last_task_grads is None) == fast and "weights" in out
        nets.append(net)
    _same(nets[0].parameters(), nets[1].parameters())


def test_supervised_keep_task_grads_for_orderings(monkeypatch):
    specs = [TaskSpec("a", "regression"), TaskSpec("b", "regression")]
    net = MultiHeadMLP(3, [4], specs)
    adapter = SupervisedMTL(
        net,
        morl.build("famo"),
        torch.optim.SGD(net.parameters(), lr=0.1),
        shared="trunk",
        loss_fn=MultiTaskLoss(specs),
        keep_task_grads=True,
    )
    adapter.step((torch.randn(8, 3), torch.randn(8, 2)))
    assert adapter.last_task_grads.shape == (2, sum(p.numel() for p in net.trunk.parameters()))


def test_mtsac_famo_critic_updates_its_logits_on_the_same_batch(float64):
    """configs/mt10_famo.yaml's wiring: FAMO on the critics, its logit step from the critic losses
    before and after the critic step on the same batch (Algorithm 1), as the authors' MT10 agent."""
    cfg = MTSACConfig(
        hidden_sizes=[16, 16],
        batch_size=T * B,
        buffer_capacity=100,
        aggregate="none",
        aggregate_critic=True,
        actor_update_freq=2,
        target_update_freq=2,
    )
    agent = MTSAC(OBS_RAW + T, A, T, cfg, morl.build("famo", w_lr=0.1), "cpu", 0)
    batch = _mtsac_batch(0)
    eps_next = torch.randn(T, B, A, generator=agent.generator.clone_state())
    alpha = agent.log_alpha.detach().exp()
    out = agent.update(batch, 1)  # step 1: no actor/target update, so the losses below are the critic's alone
    with torch.no_grad():
        after = agent._critic_losses(
            batch["obs"], batch["action"], batch["reward"], batch["next_obs"], batch["terminated"], eps_next, alpha
        )
    reference = morl.build("famo", w_lr=0.1)
    reference.loss_weights(out["critic_loss"])
    reference.update(after)
    assert float(reference.logits.abs().max()) > 1e-3
    torch.testing.assert_close(agent.critic_aggregator.logits, reference.logits, rtol=TOL, atol=TOL)
