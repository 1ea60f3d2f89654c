"""The multi-task vector environment every env in ``envs/`` is: task one-hot, SAME-STEP autoreset.

Subclasses only simulate; this base owns what the contract (docs/environments.md) promises
everywhere: observations ``[num_envs, obs_dim]`` float32 whose last ``num_tasks`` entries are
the task one-hot, truncation at ``max_episode_steps``, SAME-STEP autoreset with
``info["final_obs"]``, per-step ``info["success"]`` and per-episode statistics. Rewards are
``[num_envs]``, or ``[num_envs, reward_dim]`` for a multi-objective env (``reward_dim`` set).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space


class MultiTaskVecEnv(gym.vector.VectorEnv):
    """A vector of sub-environments, ``envs_per_task`` per task, grouped by task.

    Sub-env ``i`` runs task ``i // envs_per_task``. Subclasses implement the ``_sim_*`` hooks on
    the raw observation (without the one-hot); everything episodic happens here.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        task_names: list[str],
        envs_per_task: int,
        raw_obs_dim: int,
        action_dim: int,
        max_episode_steps: int,
        raw_obs_low: np.ndarray | float = -np.inf,
        raw_obs_high: np.ndarray | float = np.inf,
        reward_dim: int | None = None,
    ) -> None:
        if envs_per_task < 1:
            raise ValueError(f"envs_per_task must be >= 1, got {envs_per_task}")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        if reward_dim is not None and reward_dim < 1:
            raise ValueError(f"reward_dim must be >= 1 (objectives) or None (scalar reward), got {reward_dim}")
        self.task_names = list(task_names)
        self.num_tasks = len(self.task_names)
        self.envs_per_task = int(envs_per_task)
        self.num_envs = self.num_tasks * self.envs_per_task
        self.max_episode_steps = int(max_episode_steps)
        self.task_ids = np.repeat(np.arange(self.num_tasks, dtype=np.int64), self.envs_per_task)
        self._one_hot = np.eye(self.num_tasks, dtype=np.float32)[self.task_ids]

        low = np.concatenate(
            [np.broadcast_to(np.asarray(raw_obs_low, np.float32), (raw_obs_dim,)), np.zeros(self.num_tasks, np.float32)]
        )
        high = np.concatenate(
            [np.broadcast_to(np.asarray(raw_obs_high, np.float32), (raw_obs_dim,)), np.ones(self.num_tasks, np.float32)]
        )
        self.single_observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

        n = self.num_envs
        # None: one scalar reward per sub-env; M: a reward vector of M objectives per sub-env
        self.reward_dim = None if reward_dim is None else int(reward_dim)
        self._ep_return = np.zeros(n if reward_dim is None else (n, self.reward_dim), np.float64)
        self._ep_length = np.zeros(n, np.int64)
        self._ep_success = np.zeros(n, bool)
        self.episodes_completed = np.zeros(n, np.int64)
        self._obs: np.ndarray | None = None
        # optional per-task reward scaling (morl.envs.reward_normalization; make_env sets it): it
        # changes the rewards step() returns for learning, never the episode returns reported
        self.reward_normalizer = None

    # -- hooks for subclasses -------------------------------------------------------------
    def _sim_seed(self, seed: int) -> None:
        """(Re)create every random generator of the simulation from ``seed``."""
        raise NotImplementedError

    def _sim_reset(self, idx: np.ndarray) -> np.ndarray:
        """Start new episodes in sub-envs ``idx``; return their raw observations ``[len(idx), raw]``."""
        raise NotImplementedError

    def _sim_step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Advance every sub-env: ``(raw_obs [N, raw], reward [N] or [N, M], terminated [N] bool, success [N] bool)``."""
        raise NotImplementedError

    def _sim_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def _sim_load_state(self, state: dict[str, Any]) -> bool:
        """Restore the simulation; return True when the episodes in progress were restored too
        (False: the caller starts fresh episodes everywhere)."""
        raise NotImplementedError

    # -- gymnasium API --------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start new episodes in every sub-env; ``seed`` re-seeds every random generator."""
        if seed is not None:
            self._sim_seed(int(seed))
        self._start_fresh()
        return self._obs.copy(), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One step of every sub-env, with SAME-STEP autoreset (see the module docstring).

        The reward is float32 ``[N]``, or ``[N, reward_dim]`` (one column per objective)."""
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions, dtype=np.float32)
        expected = (self.num_envs, self.single_action_space.shape[0])
        if actions.shape != expected:
            raise ValueError(f"actions must have shape {expected} (num_envs, action_dim), got {actions.shape}")
        if not np.isfinite(actions).all():
            raise ValueError("actions contain NaN or inf; every entry must be finite in [-1, 1]")
        raw, raw_reward, terminated, success = self._sim_step(np.clip(actions, -1.0, 1.0))
        reward = raw_reward.astype(np.float32)
        self._ep_return += reward
        if self.reward_normalizer is not None:
            reward = self.reward_normalizer(self.task_ids, raw_reward).astype(np.float32)
        self._ep_length += 1
        self._ep_success |= success
        truncated = (self._ep_length >= self.max_episode_steps) & ~terminated
        done = terminated | truncated

        obs = np.concatenate([raw.astype(np.float32, copy=False), self._one_hot], axis=1)
        info = {
            "final_obs": obs.copy(),
            "success": success.astype(np.float32),
            "episode_success": self._ep_success.astype(np.float32),
            "episode_return": self._ep_return.astype(np.float32),
            "episode_length": self._ep_length.copy(),
        }
        if done.any():
            idx = np.flatnonzero(done)
            obs[idx, : raw.shape[1]] = self._sim_reset(idx)
            self._ep_return[idx] = 0.0
            self._ep_length[idx] = 0
            self._ep_success[idx] = False
            self.episodes_completed[idx] += 1
        self._obs = obs
        return obs.copy(), reward, terminated.copy(), truncated, info

    def observations(self) -> np.ndarray:
        """The current observations ``[num_envs, obs_dim]`` (what the last reset/step returned,
        or, after :meth:`load_state_dict`, the restored ones)."""
        if self._obs is None:
            raise RuntimeError("call reset() first")
        return self._obs.copy()

    # -- checkpointing --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue deterministically: simulator/RNG state and episode counters."""
        return {
            "num_envs": self.num_envs,
            "task_names": list(self.task_names),
            "sim": self._sim_state(),
            "obs": None if self._obs is None else self._obs.copy(),
            "ep_return": self._ep_return.copy(),
            "ep_length": self._ep_length.copy(),
            "ep_success": self._ep_success.copy(),
            "episodes_completed": self.episodes_completed.copy(),
            "reward_normalizer": None if self.reward_normalizer is None else self.reward_normalizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; afterwards :meth:`observations` gives the observations to act on."""
        if state.get("num_envs") != self.num_envs or list(state.get("task_names", [])) != self.task_names:
            raise ValueError(
                f"environment state is for {state.get('num_envs')} sub-envs of tasks {state.get('task_names')}, "
                f"this env has {self.num_envs} sub-envs of tasks {self.task_names}"
            )
        self.episodes_completed = np.array(state["episodes_completed"], np.int64)
        if self.reward_normalizer is not None and state.get("reward_normalizer") is not None:
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])
        restored = self._sim_load_state(state["sim"])
        if state["obs"] is None:  # saved before its first reset: nothing in progress, and no reset
            self._obs = None  # here either (it would draw from the restored generators)
        elif restored:
            self._obs = np.array(state["obs"], np.float32)
            self._ep_return = np.array(state["ep_return"], np.float64)
            self._ep_length = np.array(state["ep_length"], np.int64)
            self._ep_success = np.array(state["ep_success"], bool)
        else:
            self._start_fresh()

    def _start_fresh(self) -> None:
        idx = np.arange(self.num_envs)
        raw = self._sim_reset(idx)
        self._obs = np.concatenate([raw.astype(np.float32, copy=False), self._one_hot], axis=1)
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        self._ep_success[:] = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(tasks={self.num_tasks}, num_envs={self.num_envs}, max_episode_steps={self.max_episode_steps})"
