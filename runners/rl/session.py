"""Everything one RL run holds, how it is built from a config, and how it is checkpointed.

A ``Session`` is the complete state of a run between two loop iterations: environments,
agent (networks, optimizers, aggregator), replay buffer, random generators and counters.
``session_state``/``load_session_state`` capture and restore all of it, so that a run resumed
from a checkpoint continues exactly like the uninterrupted one (bitwise on CPU).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from morl.runners.errors import UserError
from morl.runners.rl.config import RLConfig, config_dict
from morl.runners.rl.metrics import LoopStats

CHECKPOINT_FORMAT = 1
NO_REPLAY = "this checkpoint holds no replay buffer (a periodic snapshot); resume from checkpoints/last.pt"


@dataclass
class Session:
    cfg: RLConfig
    device: torch.device
    env: Any  # envs.MultiTaskVecEnv
    eval_env: Any
    agent: Any  # morl.agents.rl.mtsac.MTSAC
    aggregator: Any  # morl.Aggregator (also held by the agent)
    replay: Any  # morl.agents.rl.replay.MultiTaskReplay
    sample_gen: torch.Generator  # replay sampling
    action_rng: np.random.Generator  # warm-up random actions
    obs: np.ndarray
    step: int = 0  # vector-env iterations done
    updates: int = 0  # gradient updates done
    stats: LoopStats = field(default_factory=LoopStats)

    @property
    def task_names(self) -> list[str]:
        return list(self.env.task_names)

    @property
    def per_task_batch(self) -> int:
        return self.cfg.agent.batch_size // self.env.num_tasks


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_envs(cfg: RLConfig, *, eval_only: bool = False):
    """The training env and the evaluation env (``None`` for the training env if ``eval_only``)."""
    from morl.runners.rl.config import env_kwargs

    return make_env_pair(cfg.env.name, dict(seed=cfg.run.seed, **env_kwargs(cfg.env)), eval_only=eval_only)


def make_env_pair(name: str, kwargs: dict[str, Any], *, eval_only: bool = False, eval_kwargs: dict | None = None):
    """``envs.make_env(name, **kwargs)`` for training and for evaluation, the latter with ``eval_kwargs``
    on top (``None`` for training if ``eval_only``)."""
    import morl.envs as envs

    try:
        train_env = None if eval_only else envs.make_env(name, **kwargs)
        eval_env = envs.make_env(name, eval=True, **{**kwargs, **(eval_kwargs or {})})
    except ValueError as exc:
        raise UserError(f"env: {str(exc).splitlines()[0]}") from None
    return train_env, eval_env


def build_agent(cfg: RLConfig, env, device: torch.device):
    """The aggregator and the MT-SAC agent for ``env``'s spaces."""
    import morl.aggregators
    from morl.agents.rl.mtsac import MTSAC

    num_tasks = env.num_tasks
    # "skip" keeps NaN/inf out of the parameters without a host sync per update.
    options = {"check_finite": "skip", **cfg.aggregator.options}
    aggregator = morl.aggregators.build(cfg.aggregator.name, **options)
    obs_dim = env.single_observation_space.shape[0]
    action_dim = env.single_action_space.shape[0]
    try:
        agent = MTSAC(obs_dim, action_dim, num_tasks, cfg.agent, aggregator, device, seed=cfg.run.seed)
    except ValueError as exc:
        raise UserError(str(exc).splitlines()[0]) from None
    return agent, agent.aggregator  # the instance the agent really calls


def build_evaluation(cfg: RLConfig) -> Session:
    """What ``morl eval`` needs: the evaluation env and the agent (no training env, no replay)."""
    from morl.runners.device import resolve_device

    device = resolve_device(cfg.run.device)
    seed_everything(cfg.run.seed)
    _, eval_env = make_envs(cfg, eval_only=True)
    agent, aggregator = build_agent(cfg, eval_env, device)
    return Session(
        cfg=cfg,
        device=device,
        env=None,
        eval_env=eval_env,
        agent=agent,
        aggregator=aggregator,
        replay=None,
        sample_gen=None,
        action_rng=None,
        obs=None,
        stats=LoopStats(eval_env.num_tasks),
    )


def build_session(cfg: RLConfig) -> Session:
    """Seed, then build envs, agent and replay buffer. Writes nothing to disk."""
    from morl.agents.rl.replay import MultiTaskReplay
    from morl.runners.device import resolve_device

    device = resolve_device(cfg.run.device)
    seed_everything(cfg.run.seed)
    env, eval_env = make_envs(cfg)
    agent, aggregator = build_agent(cfg, env, device)
    replay = MultiTaskReplay(
        env.num_tasks,
        cfg.agent.buffer_capacity // env.num_tasks,
        env.single_observation_space.shape[0],
        env.single_action_space.shape[0],
        device,
    )
    sample_gen = torch.Generator(device=device)
    sample_gen.manual_seed(cfg.run.seed + 1)
    obs, _ = env.reset(seed=cfg.run.seed)
    return Session(
        cfg=cfg,
        device=device,
        env=env,
        eval_env=eval_env,
        agent=agent,
        aggregator=aggregator,
        replay=replay,
        sample_gen=sample_gen,
        action_rng=np.random.default_rng(cfg.run.seed + 2),
        obs=obs,
        stats=LoopStats(env.num_tasks),
    )


def rng_state(s: Session) -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "sample_gen": s.sample_gen.get_state(),
        "action_rng": s.action_rng.bit_generator.state,
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def load_rng_state(s: Session, state: dict[str, Any], same_device: bool) -> None:
    # Generator states are CPU byte tensors whatever map_location the checkpoint was loaded with.
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"].cpu())
    if same_device:  # a CUDA generator state does not fit a CPU generator (and vice versa)
        s.sample_gen.set_state(state["sample_gen"].cpu())
    s.action_rng.bit_generator.state = state["action_rng"]
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([t.cpu() for t in state["cuda"]])


def session_state(s: Session, *, with_replay: bool = True) -> dict[str, Any]:
    """Everything needed to continue the run; ``with_replay=False`` for small periodic snapshots."""
    state = {
        "format": CHECKPOINT_FORMAT,
        "config": config_dict(s.cfg),
        "device_type": s.device.type,
        "step": s.step,
        "updates": s.updates,
        "task_names": s.task_names,
        "agent": s.agent.state_dict(),  # includes the aggregator's state (e.g. MoCo's Y, lambda, k)
        "env": s.env.state_dict(),
        "eval_env": s.eval_env.state_dict(),
        "rng": rng_state(s),
        "stats": s.stats.state_dict(),
    }
    if with_replay:
        state["replay"] = s.replay.state_dict()
    return state


def load_session_state(s: Session, state: dict[str, Any]) -> None:
    """Restore a ``session_state`` into a freshly built session of the same config."""
    if state.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"checkpoint format {state.get('format')!r} is not supported; expected {CHECKPOINT_FORMAT}")
    if "replay" not in state:
        raise UserError(NO_REPLAY)
    same_device = state.get("device_type", s.device.type) == s.device.type
    if not same_device:
        print(
            f"morl: warning: checkpoint written on {state['device_type']}, continuing on {s.device.type}: "
            "the random streams of sampling and exploration restart (the run is no longer bitwise reproducible)"
        )
    restore_session(s, state, same_device)
    s.obs = s.env.observations()  # the restored ones (Meta-World: first observations of fresh episodes)


def restore_session(s, state: dict[str, Any], same_device: bool) -> None:
    """What a session of either SAC kind restores alike: agent, replay, envs, counters, stats and
    random generators (the kind sets ``s.obs`` from the restored env)."""
    s.agent.load_state_dict(agent_state_for(s.agent, state, same_device))
    s.replay.load_state_dict(state["replay"])
    s.env.load_state_dict(state["env"])
    s.eval_env.load_state_dict(state["eval_env"])
    s.step = int(state["step"])
    s.updates = int(state["updates"])
    s.stats.load_state_dict(state["stats"])
    load_rng_state(s, state["rng"], same_device)


def agent_state_for(agent, state: dict[str, Any], same_device: bool) -> dict[str, Any]:
    """The checkpoint's agent state, keeping the agent's own generator when the device type changed."""
    if same_device:
        return state["agent"]
    return {**state["agent"], "generator": agent.generator.get_state()}
