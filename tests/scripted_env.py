"""A scripted multi-task vector env whose episodes end by termination, by the time limit, or both.

One sub-env per task; the raw observation is ``[sub-env, steps into the episode, episodes
started]``, so every observation names its own episode and step: a final observation (step n of
episode e) differs from the observation a reset puts in its place (step 0 of episode e + 1).
Sub-env ``i`` terminates when its step count reaches ``terminate_at[i]`` (``None``: never; the
base class's time limit truncates). The episode bookkeeping and the SAME-STEP autoreset with
``info["final_obs"]`` are the real ones of ``envs.MultiTaskVecEnv``.
"""

from __future__ import annotations

import numpy as np

from morl.envs.vector import MultiTaskVecEnv

STEP, EPISODE = 1, 2  # columns of the raw observation


class ScriptedEnv(MultiTaskVecEnv):
    def __init__(self, terminate_at=(3, None, 5), max_episode_steps: int = 5) -> None:
        self.terminate_at = np.array([-1 if t is None else t for t in terminate_at])
        super().__init__(
            [f"task-{i}" for i in range(len(terminate_at))],
            1,
            raw_obs_dim=3,
            action_dim=1,
            max_episode_steps=max_episode_steps,
        )
        self._step = np.zeros(self.num_envs, np.int64)
        self._episode = np.zeros(self.num_envs, np.int64)

    def _raw(self, idx) -> np.ndarray:
        return np.stack([np.arange(self.num_envs)[idx], self._step[idx], self._episode[idx]], axis=1).astype(np.float32)

    def _sim_seed(self, seed: int) -> None:
        pass

    def _sim_reset(self, idx: np.ndarray) -> np.ndarray:
        self._step[idx] = 0
        self._episode[idx] += 1
        return self._raw(idx)

    def _sim_step(self, actions: np.ndarray):
        self._step += 1
        terminated = self._step == self.terminate_at
        reward = 10.0 * np.arange(self.num_envs) + self._step
        return self._raw(slice(None)), reward, terminated, terminated

    def _sim_state(self):
        return {"step": self._step.copy(), "episode": self._episode.copy()}

    def _sim_load_state(self, state) -> bool:
        self._step, self._episode = state["step"].copy(), state["episode"].copy()
        return True


def check_transitions(obs: np.ndarray, next_obs: np.ndarray, terminal: np.ndarray, terminate_at: np.ndarray) -> None:
    """Rows of one sub-env's stored transitions ``[N, 3 + tasks]``: each next observation is the step
    after its observation in the SAME episode (the final one where the episode ended, not the reset
    one), and ``terminal`` is set exactly where the script terminates (never at a truncation)."""
    np.testing.assert_array_equal(next_obs[:, EPISODE], obs[:, EPISODE])
    np.testing.assert_array_equal(next_obs[:, STEP], obs[:, STEP] + 1)
    np.testing.assert_array_equal(terminal.astype(bool), next_obs[:, STEP] == terminate_at)
