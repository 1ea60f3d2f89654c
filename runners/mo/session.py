"""Everything one multi-objective run holds, how it is built, stepped and checkpointed.

A ``MOSession`` is the state between two loop iterations: the training env (P sub-envs, sub-env
p acting with policy p), the evaluation env, the MO-SAC agent, the shared replay of vector
rewards, the random generators and counters. ``session_state``/``load_session_state`` capture
and restore all of it, so a resumed run continues bitwise like the uninterrupted one (CPU).
Observations are stored without the env's task one-hot (one task: a constant 1.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from morl.runners.errors import UserError
from morl.runners.mo.config import MOConfig, config_dict
from morl.runners.rl.iteration import finite_actions
from morl.runners.rl.metrics import LoopStats, SectionTimer
from morl.runners.rl.schedule import updates_at
from morl.runners.rl.session import NO_REPLAY, make_env_pair, restore_session, rng_state, seed_everything

CHECKPOINT_FORMAT = 1
NONFINITE_ACTIONS = "the policies' actions are NaN/inf (a network overflowed)"


class MOStats(LoopStats):
    """The update metrics of a log interval (``LoopStats``' device sums) and each policy's latest
    training episode return ``[P, M]``."""

    def __init__(self, population: int, reward_dim: int) -> None:
        self.population, self.reward_dim = population, reward_dim
        super().__init__(0)
        self.last_return = np.full((population, reward_dim), np.nan)
        self.best_hv: float | None = None  # None before the first evaluation

    def reset_interval(self) -> None:
        super().reset_interval()
        self.ep_return = np.zeros((self.population, self.reward_dim))
        self.ep_count = np.zeros(self.population, np.int64)

    def add_episodes(self, info: dict[str, Any], done: np.ndarray) -> None:
        """Sub-env p is policy p: its finished episodes' vector returns."""
        if done.any():
            ended = np.flatnonzero(done)
            np.add.at(self.ep_return, ended, np.asarray(info["episode_return"], np.float64)[ended])
            np.add.at(self.ep_count, ended, 1)

    def episode_returns(self) -> np.ndarray:
        """``[P, M]`` mean return of each policy's episodes in this interval (else its previous one)."""
        seen = self.ep_count > 0
        self.last_return[seen] = self.ep_return[seen] / self.ep_count[seen, None]
        return self.last_return.copy()

    def state_dict(self) -> dict[str, Any]:
        state = {**super().state_dict(), "population": self.population, "reward_dim": self.reward_dim}
        for unused in ("last_success", "best_eval_success", "ep_success"):  # LoopStats' per-task success
            del state[unused]
        return {**state, "best_hv": self.best_hv}


@dataclass
class MOSession:
    cfg: MOConfig
    device: torch.device
    env: Any  # envs.MultiTaskVecEnv with P sub-envs, or None (evaluation only)
    eval_env: Any
    agent: Any  # morl.agents.rl.mosac.MOSAC
    replay: Any  # morl.agents.rl.replay.MultiTaskReplay (one task, vector rewards)
    sample_gen: torch.Generator | None
    action_rng: np.random.Generator | None
    obs: np.ndarray | None  # [P, obs_dim] without the one-hot
    stats: MOStats
    step: int = 0
    updates: int = 0

    @property
    def objective_names(self) -> list[str]:
        return list(self.eval_env.objective_names)


def without_onehot(obs: np.ndarray) -> np.ndarray:
    """The raw observation: an MO env's observations end with its one task's one-hot (1.0)."""
    return obs[..., :-1]


EVAL_ENVS = 20  # a conditioned agent's evaluation sub-envs: its front's preferences go through in groups


def env_counts(agent_cfg) -> tuple[int, int]:
    """Training and evaluation sub-envs: a population's P each (sub-env p is policy p), or a
    conditioned agent's ``collect_envs`` and up to ``EVAL_ENVS``."""
    if agent_cfg.conditioned:
        return agent_cfg.collect_envs, min(agent_cfg.population, EVAL_ENVS)
    return agent_cfg.population, agent_cfg.population


def make_envs(cfg: MOConfig, *, eval_only: bool = False):
    """The training env and the evaluation env (``None`` for training if ``eval_only``)."""
    train_n, eval_n = env_counts(cfg.agent)
    kwargs = dict(seed=cfg.run.seed, max_episode_steps=cfg.env.max_episode_steps, envs_per_task=train_n)
    return make_env_pair(cfg.env.name, kwargs, eval_only=eval_only, eval_kwargs={"envs_per_task": eval_n})


def build_session(cfg: MOConfig, *, for_evaluation: bool = False) -> MOSession:
    """Seed, then build envs, agent and replay (no training env and replay ``for_evaluation``)."""
    from morl.agents.rl.conditioned_mosac import ConditionedMOSAC
    from morl.agents.rl.mosac import MOSAC
    from morl.agents.rl.replay import MultiTaskReplay
    from morl.runners.device import resolve_device

    device = resolve_device(cfg.run.device)
    seed_everything(cfg.run.seed)
    env, eval_env = make_envs(cfg, eval_only=for_evaluation)
    obs_dim = eval_env.single_observation_space.shape[0] - 1
    action_dim = eval_env.single_action_space.shape[0]
    reward_dim = eval_env.reward_dim
    try:
        agent = (ConditionedMOSAC if cfg.agent.conditioned else MOSAC)(
            obs_dim,
            action_dim,
            reward_dim,
            cfg.agent,
            cfg.aggregator.name,
            cfg.aggregator.options,
            device,
            cfg.run.seed,
        )
    except ValueError as exc:
        raise UserError(str(exc).splitlines()[0]) from None
    session = MOSession(
        cfg, device, env, eval_env, agent, None, None, None, None, MOStats(env_counts(cfg.agent)[0], reward_dim)
    )
    if not for_evaluation:
        session.replay = MultiTaskReplay(1, cfg.agent.buffer_capacity, obs_dim, action_dim, device, reward_dim)
        session.sample_gen = torch.Generator(device=device).manual_seed(cfg.run.seed + 1)
        session.action_rng = np.random.default_rng(cfg.run.seed + 2)
        session.obs = without_onehot(env.reset(seed=cfg.run.seed)[0])
    return session


def collect_action(s: MOSession) -> np.ndarray:
    """Uniform random actions during the warm-up, then policy p's sample for sub-env p (a
    conditioned agent's at a freshly drawn preference per sub-env)."""
    if s.step < s.cfg.run.warmup_steps:
        shape = (s.env.num_envs, s.env.single_action_space.shape[0])
        return s.action_rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
    action = s.agent.act(torch.as_tensor(s.obs, device=s.device), deterministic=False)
    return finite_actions(action.cpu().numpy(), NONFINITE_ACTIONS)


def iterate(s: MOSession, timer: SectionTimer) -> None:
    """One step: every sub-env steps once with its policy, the P transitions are stored (next
    observation: ``final_obs``; ``terminated``, not ``truncated``), then ``updates_per_step`` updates."""
    run = s.cfg.run
    with timer("env"):
        actions = collect_action(s)
        next_obs, reward, terminated, truncated, info = s.env.step(actions)
    s.replay.add(s.env.task_ids, s.obs, actions, reward, without_onehot(info["final_obs"]), terminated)
    s.stats.add_episodes(info, terminated | truncated)
    s.stats.transitions += s.env.num_envs
    s.obs = without_onehot(next_obs)
    s.step += 1
    updates = updates_at(s.step, run.warmup_steps, run.updates_per_step, False)
    if updates:
        with timer("update"):
            for _ in range(updates):
                batch = {k: v[0] for k, v in s.replay.sample(s.cfg.agent.batch_size, s.sample_gen).items()}
                s.stats.add_update(s.agent.update(batch, s.updates))
                s.updates += 1


def session_state(s: MOSession) -> dict[str, Any]:
    """Everything needed to continue the run bitwise."""
    return {
        "format": CHECKPOINT_FORMAT,
        "config": config_dict(s.cfg),
        "device_type": s.device.type,
        "step": s.step,
        "updates": s.updates,
        "agent": s.agent.state_dict(),
        "replay": s.replay.state_dict(),
        "env": s.env.state_dict(),
        "eval_env": s.eval_env.state_dict(),
        "rng": rng_state(s),
        "stats": s.stats.state_dict(),
    }


def load_session_state(s: MOSession, state: dict[str, Any]) -> None:
    """Restore a ``session_state`` into a freshly built session of the same config."""
    if "replay" not in state:
        raise UserError(NO_REPLAY)
    restore_session(s, state, state.get("device_type", s.device.type) == s.device.type)
    s.obs = without_onehot(s.env.observations())
