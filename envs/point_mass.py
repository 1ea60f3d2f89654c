"""``point_mass``: a fast multi-task env whose tasks pull a shared policy in opposite directions.

A point in the plane starts near the origin; task ``k``'s goal lies at angle ``2*pi*k/K`` on a
circle of radius ``goal_distance``. The action is a velocity command in ``[-1, 1]^2``; the
goal is NOT observed, so the policy must read the task one-hot to know where to go. Evenly
spaced goals make the per-task actor gradients conflict (for K = 2 or 4 some are exactly
opposite), which is what gradient aggregation is about. All sub-envs are simulated as one
numpy batch: a step costs a few array operations whatever ``num_envs`` is.

Dynamics (per step; defaults ``dt`` = 0.1, ``max_speed`` = 2): ``vel = max_speed * a``,
``pos = clip(pos + dt * vel, -arena, arena)``: the goal (distance 1) is 5 steps away, episodes
last 20 steps, success means within ``success_radius`` = 0.2 of the goal.
Reward: ``-|pos - goal| + success_bonus * [|pos - goal| < success_radius]``.
Observation: ``[pos (2), vel (2), one-hot (K)]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from morl.envs.vector import MultiTaskVecEnv


class PointMassEnv(MultiTaskVecEnv):
    """The vectorised point-mass multi-task environment (see the module docstring)."""

    def __init__(
        self,
        num_tasks: int = 4,
        envs_per_task: int = 1,
        seed: int = 0,
        max_episode_steps: int = 20,
        goal_distance: float = 1.0,
        success_radius: float = 0.2,
        success_bonus: float = 1.0,
        max_speed: float = 2.0,
        dt: float = 0.1,
        init_noise: float = 0.1,
        arena: float = 1.5,
    ) -> None:
        if num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1 for point_mass, got {num_tasks}")
        positive = {
            "goal_distance": goal_distance,
            "success_radius": success_radius,
            "max_speed": max_speed,
            "dt": dt,
            "arena": arena,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if goal_distance >= arena:
            raise ValueError(f"goal_distance ({goal_distance}) must be inside the arena (< {arena})")
        super().__init__(
            task_names=[f"goal-{k}" for k in range(num_tasks)],
            envs_per_task=envs_per_task,
            raw_obs_dim=4,
            action_dim=2,
            max_episode_steps=max_episode_steps,
            raw_obs_low=np.array([-arena, -arena, -max_speed, -max_speed], np.float32),
            raw_obs_high=np.array([arena, arena, max_speed, max_speed], np.float32),
        )
        angles = 2 * np.pi * np.arange(num_tasks) / num_tasks
        self.goals = goal_distance * np.stack([np.cos(angles), np.sin(angles)], axis=1)  # [K, 2]
        self._goal_of_env = self.goals[self.task_ids]  # [N, 2]
        self.success_radius = float(success_radius)
        self.success_bonus = float(success_bonus)
        self.max_speed = float(max_speed)
        self.dt = float(dt)
        self.init_noise = float(init_noise)
        self.arena = float(arena)
        self._pos = np.zeros((self.num_envs, 2))
        self._vel = np.zeros((self.num_envs, 2))
        self._sim_seed(seed)

    def _sim_seed(self, seed: int) -> None:
        self._rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))

    def _raw(self, idx) -> np.ndarray:
        return np.concatenate([self._pos[idx], self._vel[idx]], axis=1)

    def _sim_reset(self, idx: np.ndarray) -> np.ndarray:
        self._pos[idx] = self._rng.uniform(-self.init_noise, self.init_noise, size=(len(idx), 2))
        self._vel[idx] = 0.0
        return self._raw(idx)

    def _sim_step(self, actions: np.ndarray):
        self._vel = self.max_speed * actions.astype(np.float64)
        self._pos = np.clip(self._pos + self.dt * self._vel, -self.arena, self.arena)
        dist = np.linalg.norm(self._pos - self._goal_of_env, axis=1)
        success = dist < self.success_radius
        reward = -dist + self.success_bonus * success
        return self._raw(slice(None)), reward, np.zeros(self.num_envs, bool), success

    def _sim_state(self) -> dict[str, Any]:
        return {"pos": self._pos.copy(), "vel": self._vel.copy(), "rng": self._rng.bit_generator.state}

    def _sim_load_state(self, state: dict[str, Any]) -> bool:
        self._pos = np.array(state["pos"], np.float64)
        self._vel = np.array(state["vel"], np.float64)
        self._rng.bit_generator.state = state["rng"]
        return True
