"""Meta-World 3 MT10 / MT50 / MT1 as a :class:`MultiTaskVecEnv`, under two protocols.

* ``mtrl`` (the protocol behind the MT10 tables of CAGrad / MoCo): each task gets ONE goal,
  drawn from the seed, kept for the whole run (evaluation uses the same goals); 150-step episodes.
* ``metaworld_v3`` (Meta-World+): a new goal out of the task's 50 pre-generated goals at every
  reset; 500-step episodes; evaluation envs walk through all 50 goals in a shuffled cycle, so 50
  evaluation episodes per task visit every goal once (as ``metaworld.evaluation`` does).

Why not ``gym.make_vec("Meta-World/MT10")``: it passes the same seed to every sub-env, has no
``envs_per_task``, returns ``final_obs`` as an object array, and its wrapper stack costs ~15%
of the step time. We build the same sub-envs from Meta-World's public benchmark API
(``metaworld.MT10(seed)``, ``Task`` objects, ``env.set_task``) and do the episodic bookkeeping
once, in :class:`morl.envs.vector.MultiTaskVecEnv`. Goal choice is the only randomness of a
Meta-World episode once a task is set (``_freeze_rand_vec``), and it is drawn from our own
seeded ``numpy`` generators, never from the global RNG Meta-World falls back on.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import numpy as np

from morl.envs.choices import REWARD_FUNCTION_VERSIONS
from morl.envs.vector import MultiTaskVecEnv

PROTOCOL_EPISODE_STEPS = {"mtrl": 150, "metaworld_v3": 500}
# Meta-World 3 keeps both reward functions on every v3 task: "v1" is the original paper's (the
# reward mtrl/CAGrad/MoCo trained on, v1 tasks), "v2" the reworked one (Meta-World+'s default).
# Offsets that keep the seed streams of training goals, evaluation goals and mtrl's fixed goals apart.
_TRAIN_STREAM, _EVAL_STREAM, _FIXED_GOAL_STREAM = 0, 1, 2


def mt1_task_names() -> list[str]:
    """Task names accepted after ``mt1:`` (every Meta-World v3 environment)."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS

    return sorted(ALL_V3_ENVIRONMENTS)


@functools.lru_cache(maxsize=4)
def _benchmark(name: str, seed: int):
    """The Meta-World benchmark object (builds 50 goals per task: ~5 s for MT10), cached so that
    a training env and its evaluation env with the same seed share one construction."""
    import metaworld

    if name == "mt10":
        return metaworld.MT10(seed=seed)
    if name == "mt50":
        return metaworld.MT50(seed=seed)
    return metaworld.MT1(name.split(":", 1)[1], seed=seed)


class MetaWorldVecEnv(MultiTaskVecEnv):
    """Meta-World sub-envs stepped in-process, one after the other (MuJoCo dominates the cost)."""

    def __init__(
        self,
        name: str,
        seed: int,
        protocol: str = "mtrl",
        max_episode_steps: int | None = None,
        envs_per_task: int = 1,
        eval: bool = False,
        terminate_on_success: bool | None = None,
        reward_function_version: str = "v2",
    ) -> None:
        if protocol not in PROTOCOL_EPISODE_STEPS:
            raise ValueError(f"unknown protocol {protocol!r}; valid protocols: {', '.join(PROTOCOL_EPISODE_STEPS)}")
        if reward_function_version not in REWARD_FUNCTION_VERSIONS:
            raise ValueError(
                f"unknown reward_function_version {reward_function_version!r}; "
                f"valid versions: {', '.join(REWARD_FUNCTION_VERSIONS)}"
            )
        self.reward_function_version = reward_function_version
        bench = _benchmark(name, int(seed))
        names = list(bench.train_classes)
        self.name = name
        self._bench_seed = int(seed)
        self.protocol = protocol
        self.eval = bool(eval)
        # Meta-World's own evaluation stops an episode at the first success; the success rate is
        # unchanged (success = at any step) and evaluation gets faster.
        self.terminate_on_success = self.eval if terminate_on_success is None else bool(terminate_on_success)
        steps = max_episode_steps or PROTOCOL_EPISODE_STEPS[protocol]
        self._goals = [[t for t in bench.train_tasks if t.env_name == n] for n in names]  # [K][50] Task

        self._envs = []
        for n in names:
            for _ in range(envs_per_task):
                env = bench.train_classes[n](reward_function_version=reward_function_version)
                env.max_path_length = steps  # Meta-World raises past this; we truncate exactly here
                self._envs.append(env)
        # Observation bounds need a task set; all sub-envs of a benchmark share them.
        self._envs[0].set_task(self._goals[0][0])
        space = self._envs[0].observation_space
        super().__init__(names, envs_per_task, space.shape[0], 4, steps, space.low, space.high)
        self._raw = np.zeros((self.num_envs, space.shape[0]), np.float64)
        self._sim_seed(int(seed))

    # -- goals ----------------------------------------------------------------------------
    def _sim_seed(self, seed: int) -> None:
        if seed != self._bench_seed:  # the 50 goals per task are themselves drawn from the seed
            bench = _benchmark(self.name, seed)
            self._goals = [[t for t in bench.train_tasks if t.env_name == n] for n in self.task_names]
            self._bench_seed = seed
        n_goals = len(self._goals[0])
        fixed = np.random.default_rng([seed, _FIXED_GOAL_STREAM]).integers(n_goals, size=self.num_tasks)
        self._fixed_goal = fixed.astype(np.int64)  # mtrl: the one goal of each task, same for train and eval
        stream = _EVAL_STREAM if self.eval else _TRAIN_STREAM
        children = np.random.SeedSequence([seed, stream]).spawn(self.num_envs)
        self._rngs = [np.random.default_rng(c) for c in children]
        # metaworld_v3 evaluation: a shuffled cycle over all goals per sub-env.
        self._cycle = np.stack([rng.permutation(n_goals) for rng in self._rngs]) if self.eval else None
        self._cycle_pos = np.zeros(self.num_envs, np.int64)
        self.goal_index = np.full(self.num_envs, -1, np.int64)  # goal of each sub-env's current episode
        if self.protocol == "mtrl":
            for i in range(self.num_envs):
                self._set_goal(i, int(self._fixed_goal[self.task_ids[i]]))

    def _set_goal(self, i: int, goal: int) -> None:
        if self.goal_index[i] != goal:
            self._envs[i].set_task(self._goals[self.task_ids[i]][goal])
            self.goal_index[i] = goal

    def _next_goal(self, i: int) -> int:
        if self.protocol == "mtrl":
            return int(self._fixed_goal[self.task_ids[i]])
        if self._cycle is not None:
            goal = int(self._cycle[i, self._cycle_pos[i] % self._cycle.shape[1]])
            self._cycle_pos[i] += 1
            return goal
        return int(self._rngs[i].integers(len(self._goals[self.task_ids[i]])))

    # -- simulation -----------------------------------------------------------------------
    def _sim_reset(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx), self._raw.shape[1]), np.float64)
        for j, i in enumerate(idx):
            self._set_goal(int(i), self._next_goal(int(i)))
            out[j], _ = self._envs[i].reset()
        return out

    def _sim_step(self, actions: np.ndarray):
        n = self.num_envs
        reward = np.empty(n, np.float64)
        success = np.empty(n, bool)
        raw = self._raw
        for i, env in enumerate(self._envs):
            raw[i], reward[i], _, _, info = env.step(actions[i])
            success[i] = info["success"] > 0.5
        terminated = success.copy() if self.terminate_on_success else np.zeros(n, bool)
        return raw, reward, terminated, success

    # -- checkpointing --------------------------------------------------------------------
    def _sim_state(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "eval": self.eval,
            "fixed_goal": self._fixed_goal.copy(),
            "rngs": [rng.bit_generator.state for rng in self._rngs],
            "cycle": None if self._cycle is None else self._cycle.copy(),
            "cycle_pos": self._cycle_pos.copy(),
            "bench_seed": self._bench_seed,
            "goals_digest": self._goals_digest(),
        }

    def _sim_load_state(self, state: dict[str, Any]) -> bool:
        if state["protocol"] != self.protocol or state["eval"] != self.eval:
            raise ValueError(
                f"environment state is for protocol={state['protocol']!r}, eval={state['eval']}; "
                f"this env has protocol={self.protocol!r}, eval={self.eval}"
            )
        if state["bench_seed"] != self._bench_seed:
            bench = _benchmark(self.name, int(state["bench_seed"]))
            self._goals = [[t for t in bench.train_tasks if t.env_name == n] for n in self.task_names]
            self._bench_seed = int(state["bench_seed"])
        if state["goals_digest"] != self._goals_digest():
            raise ValueError("environment state was saved with different Meta-World goals (another seed?)")
        self._fixed_goal = np.array(state["fixed_goal"], np.int64)
        for rng, rng_state in zip(self._rngs, state["rngs"]):
            rng.bit_generator.state = rng_state
        self._cycle = None if state["cycle"] is None else np.array(state["cycle"], np.int64)
        self._cycle_pos = np.array(state["cycle_pos"], np.int64)
        self.goal_index[:] = -1
        # MuJoCo's mid-episode state is not restored: every sub-env starts a fresh episode.
        return False

    def _goals_digest(self) -> str:
        digest = hashlib.sha256()
        for goals in self._goals:
            for task in goals:
                digest.update(task.data)
        return digest.hexdigest()

    def close_extras(self, **kwargs) -> None:
        for env in self._envs:
            env.close()
