"""MO-Gymnasium's multi-objective MuJoCo tasks as a :class:`MultiTaskVecEnv` with vector rewards.

Each sub-env is MO-Gymnasium's own environment class (``gymnasium.make(env_id).unwrapped``,
so the reward vector is MO-Gymnasium's code, not a re-implementation), stepped in-process one
after the other; episode length, SAME-STEP autoreset and the episode statistics are the base
class's. One task, so the observation ends with a single ``1.0`` (the one-hot, as for MT1); the
reward is float32 ``[num_envs, reward_dim]``, one column per objective, in MO-Gymnasium's order.

Seeding: sub-env ``i`` of an env built with ``seed`` starts from
``env.reset(seed=sub_env_seed(seed, i, eval))``; later episodes continue that sub-env's own
generator (``env.reset()``), as a single gymnasium env does. The evaluation twin (``eval=True``)
draws from another stream, so its initial states differ from the training env's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from morl.envs.vector import MultiTaskVecEnv

_TRAIN_STREAM, _EVAL_STREAM = 0, 1


@dataclass(frozen=True)
class MOTask:
    """What is fixed about one MO-Gymnasium task: its objectives and its hypervolume reference point."""

    objectives: tuple[str, ...]
    ref_point: tuple[float, ...]


# Reference points: MORL-Baselines' examples/ (morld_cheetah.py, morld_hopper.py, gpi_pd_hopper.py;
# hypervolume of discounted returns, gamma 0.99); walker2d and swimmer have none there: the same -100.
MO_TASKS: dict[str, MOTask] = {
    "mo-halfcheetah-v5": MOTask(("forward_velocity", "control_cost"), (-100.0, -100.0)),
    "mo-hopper-v5": MOTask(("forward_velocity", "jump_height", "control_cost"), (-100.0, -100.0, -100.0)),
    "mo-hopper-2obj-v5": MOTask(("forward_velocity", "jump_height"), (-100.0, -100.0)),
    "mo-walker2d-v5": MOTask(("forward_velocity", "control_cost"), (-100.0, -100.0)),
    "mo-swimmer-v5": MOTask(("forward_velocity", "control_cost"), (-100.0, -100.0)),
}


def mo_env_names() -> list[str]:
    """The MO-Gymnasium task ids :func:`morl.envs.make_env` accepts."""
    return list(MO_TASKS)


def reference_point(name: str) -> np.ndarray:
    """The hypervolume reference point ``[M]`` of task ``name`` (maximisation: every objective above it)."""
    if name not in MO_TASKS:
        raise ValueError(f"unknown multi-objective env {name!r}; valid names: {', '.join(MO_TASKS)}")
    return np.array(MO_TASKS[name].ref_point, np.float64)


def sub_env_seed(seed: int, index: int, eval: bool = False) -> int:
    """The gymnasium seed of sub-env ``index``'s first episode: 32 bits of ``SeedSequence([seed, stream, index])``."""
    stream = _EVAL_STREAM if eval else _TRAIN_STREAM
    return int(np.random.SeedSequence([int(seed), stream, int(index)]).generate_state(1)[0])


def _import_mo_gymnasium():
    try:
        import mo_gymnasium  # noqa: F401  (registers the mo-* ids with gymnasium)
    except ImportError:
        raise ImportError(
            "the multi-objective envs need mo-gymnasium: pip install 'morl-suite[mo]' (make install includes it)"
        ) from None


class MOGymnasiumVecEnv(MultiTaskVecEnv):
    """``envs_per_task`` copies of one MO-Gymnasium MuJoCo task; ``reward_dim`` objectives."""

    def __init__(
        self, name: str, seed: int, envs_per_task: int = 1, max_episode_steps: int | None = None, eval: bool = False
    ) -> None:
        if name not in MO_TASKS:
            raise ValueError(f"unknown multi-objective env {name!r}; valid names: {', '.join(MO_TASKS)}")
        if envs_per_task < 1:
            raise ValueError(f"envs_per_task must be >= 1, got {envs_per_task}")
        _import_mo_gymnasium()
        import gymnasium

        spec = gymnasium.spec(name)
        self.name, self.eval = name, bool(eval)
        self._envs = [gymnasium.make(name, disable_env_checker=True).unwrapped for _ in range(int(envs_per_task))]
        first = self._envs[0]
        space = first.action_space
        if not (np.all(space.low == -1.0) and np.all(space.high == 1.0)):
            raise ValueError(f"{name}: action space {space} is not [-1, 1]^A, which the vector-env contract assumes")
        task = MO_TASKS[name]
        if first.reward_dim != len(task.objectives):
            raise ValueError(
                f"{name}: MO-Gymnasium gives {first.reward_dim} objectives, this wrapper knows {task.objectives}"
            )
        self.objective_names = list(task.objectives)
        self.ref_point = np.array(task.ref_point, np.float64)
        obs_space = first.observation_space
        super().__init__(
            [name],
            envs_per_task,
            obs_space.shape[0],
            space.shape[0],
            max_episode_steps or spec.max_episode_steps,
            obs_space.low,
            obs_space.high,
            reward_dim=first.reward_dim,
        )
        self._raw = np.zeros((self.num_envs, obs_space.shape[0]), np.float64)
        self._sim_seed(int(seed))

    # -- simulation -----------------------------------------------------------------------
    def _sim_seed(self, seed: int) -> None:
        # consumed by each sub-env's next reset: the first episode after (re)seeding
        self._pending_seed: list[int | None] = [sub_env_seed(seed, i, self.eval) for i in range(self.num_envs)]

    def _sim_reset(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx), self._raw.shape[1]), np.float64)
        for j, i in enumerate(idx):
            out[j], _ = self._envs[i].reset(seed=self._pending_seed[i])
            self._pending_seed[i] = None
        return out

    def _sim_step(self, actions: np.ndarray):
        n = self.num_envs
        reward = np.empty((n, self.reward_dim), np.float32)
        terminated = np.empty(n, bool)
        for i, env in enumerate(self._envs):
            self._raw[i], reward[i], terminated[i], _, _ = env.step(actions[i])
        return self._raw, reward, terminated, np.zeros(n, bool)  # locomotion has no success criterion

    # -- checkpointing --------------------------------------------------------------------
    def _sim_state(self) -> dict[str, Any]:
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION  # everything mj_step reads: bitwise continuation
        physics = []
        for env in self._envs:
            state = np.empty(mujoco.mj_stateSize(env.model, spec), np.float64)
            mujoco.mj_getState(env.model, env.data, state, spec)
            physics.append(state)
        return {
            "name": self.name,
            "eval": self.eval,
            "physics": physics,
            "rngs": [env.np_random.bit_generator.state for env in self._envs],
            "pending_seed": list(self._pending_seed),
        }

    def _sim_load_state(self, state: dict[str, Any]) -> bool:
        import mujoco

        if state["name"] != self.name or state["eval"] != self.eval:
            raise ValueError(
                f"environment state is for {state['name']!r}, eval={state['eval']}; "
                f"this env is {self.name!r}, eval={self.eval}"
            )
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        for env, physics, rng in zip(self._envs, state["physics"], state["rngs"]):
            mujoco.mj_setState(env.model, env.data, np.asarray(physics, np.float64), spec)
            env.np_random.bit_generator.state = rng
        self._pending_seed = list(state["pending_seed"])
        return True

    def close_extras(self, **kwargs) -> None:
        for env in self._envs:
            env.close()
