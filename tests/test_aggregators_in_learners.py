"""Every registered aggregator works in every learner: morl.backward, MT-SAC, the
stable-baselines3 adapter and the supervised adapter (one short update each).

What each method computes is checked elsewhere (tests/aggregators/test_properties.py and the
per-method files); here: each learner hands the method what it needs (losses for the methods
that read them, nothing per task for the loss weightings), and the update moves the
parameters by a finite amount along a direction that is not zero.
"""

from __future__ import annotations

import pytest
import torch

import morl
from morl.agents.rl.mtsac import MTSAC, MTSACConfig
from morl.agents.rl.sb3 import MultiTaskSAC
from morl.agents.supervised.multitask import MultiHeadMLP, MultiTaskLoss, SupervisedMTL, TaskSpec
from morl.aggregators import available
from morl.envs import make_env

NAMES = available()


def _moved(before, after) -> float:
    return max(float((a.detach() - b).abs().max()) for a, b in zip(before, after))


def _finite(params) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in params)


@pytest.mark.parametrize("name", NAMES)
def test_morl_backward(name):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    agg = morl.build(name)
    x, y = torch.randn(32, 6), torch.randn(32, 3)
    before = [p.detach().clone() for p in model.parameters()]
    for _ in range(3):
        losses = ((model(x) - y) ** 2).mean(dim=0)
        opt.zero_grad()
        morl.backward(losses, list(model.parameters()), agg)
        opt.step()
    after = list(model.parameters())
    assert _finite(after) and _moved(before, after) > 0


@pytest.mark.parametrize("name", NAMES)
def test_mtsac_update(name):
    t, obs_raw, act, b = 3, 5, 2, 16
    cfg = MTSACConfig(
        hidden_sizes=[16, 16], batch_size=t * b, buffer_capacity=100, actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3
    )
    agent = MTSAC(obs_raw + t, act, t, cfg, morl.build(name), "cpu", 0)
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(t, b, obs_raw + t, generator=g)
    obs[..., obs_raw:] = torch.eye(t).unsqueeze(1)
    batch = {
        "obs": obs,
        "action": torch.rand(t, b, act, generator=g) * 2 - 1,
        "reward": torch.randn(t, b, generator=g),
        "next_obs": obs.clone(),
        "terminated": torch.zeros(t, b),
    }
    before = [p.detach().clone() for p in agent.actor.parameters()]
    for step in range(3):
        agent.update(batch, step)
    after = list(agent.actor.parameters())
    assert _finite(after) and _moved(before, after) > 0


@pytest.mark.parametrize("name", NAMES)
def test_sb3_adapter_trains(name):
    model = MultiTaskSAC(
        "MlpPolicy",
        make_env("point_mass", seed=0),
        aggregator=name,
        seed=0,
        batch_size=32,
        learning_starts=32,
        policy_kwargs=dict(net_arch=[16, 16]),
    )
    before = [p.detach().clone() for p in model.actor.parameters()]
    model.learn(48)  # 16 vector steps of 4 envs, then gradient steps
    after = list(model.actor.parameters())
    assert _finite(after) and _moved(before, after) > 0


@pytest.mark.parametrize("name", NAMES)
def test_supervised_adapter_step(name):
    specs = [TaskSpec("a", "classification", 3), TaskSpec("b", "regression"), TaskSpec("c", "classification", 2)]
    torch.manual_seed(0)
    net = MultiHeadMLP(5, [8, 6], specs)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    adapter = SupervisedMTL(net, morl.build(name), opt, shared="trunk", loss_fn=MultiTaskLoss(specs))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 5, generator=g)
    y = torch.stack(
        [
            torch.randint(0, 3, (16,), generator=g).float(),
            torch.randn(16, generator=g),
            torch.randint(0, 2, (16,), generator=g).float(),
        ],
        1,
    )
    before = [p.detach().clone() for p in net.trunk.parameters()]
    for _ in range(3):
        adapter.step((x, y))
    after = list(net.trunk.parameters())
    assert _finite(after) and _moved(before, after) > 0
