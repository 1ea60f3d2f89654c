"""Multi-task environments: Meta-World wrappers, MO-Gymnasium's multi-objective MuJoCo tasks
(vector rewards) and our own fast vectorised tasks.

``make_env(name, seed=..., protocol=..., ...)`` returns a :class:`MultiTaskVecEnv` (a
``gymnasium.vector.VectorEnv``); see docs/environments.md for the contract.
"""

from __future__ import annotations

from morl.envs.choices import NORMALIZATION_CHOICES, PROTOCOLS
from morl.envs.evaluation import default_eval_episodes, evaluate_policy, evaluate_preferences
from morl.envs.metaworld_env import MetaWorldVecEnv, mt1_task_names
from morl.envs.mo_gymnasium_env import MOGymnasiumVecEnv, mo_env_names, reference_point
from morl.envs.point_mass import PointMassEnv
from morl.envs.reward_normalization import RewardNormalizer
from morl.envs.vector import MultiTaskVecEnv


def available_envs() -> list[str]:
    """Names accepted by :func:`make_env` (``mt1:<task>`` takes any Meta-World v3 task name; the
    ``mo-*`` names have vector rewards)."""
    return ["mt1:<task-name>", "mt10", "mt50", "point_mass", *mo_env_names()]


def make_env(
    name: str,
    *,
    seed: int,
    protocol: str = "mtrl",
    max_episode_steps: int | None = None,
    num_tasks: int | None = None,
    envs_per_task: int = 1,
    eval: bool = False,
    reward_function_version: str = "v2",
    reward_normalization: str = "none",
) -> MultiTaskVecEnv:
    """Build the multi-task vector env ``name`` ("mt10", "mt50", "mt1:<task>", "point_mass", or an
    MO-Gymnasium task such as "mo-hopper-v5", whose rewards are ``[num_envs, env.reward_dim]``).

    ``protocol`` ("mtrl" | "metaworld_v3") sets Meta-World's goal sampling and episode length;
    ``max_episode_steps`` overrides the length; ``num_tasks`` is point_mass's task count
    (default 4; ignored by Meta-World); ``eval=True`` builds the evaluation twin (mtrl: same
    goals; metaworld_v3: its own goal stream; Meta-World episodes end at the first success;
    MO-Gymnasium tasks: their own stream of initial states).
    ``reward_function_version`` ("v1" | "v2") picks Meta-World's reward function (point_mass
    has only one); ``reward_normalization`` ("none" | "exponential" | "running") scales the
    training env's rewards per task (``morl.envs.reward_normalization``; the evaluation env
    reports raw returns either way). Unknown names, protocols or options raise ``ValueError``
    listing the valid ones.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid protocols: {', '.join(PROTOCOLS)}")
    if not isinstance(name, str):
        raise ValueError(f"env name must be a string, one of {', '.join(available_envs())}; got {name!r}")
    if reward_normalization not in NORMALIZATION_CHOICES:
        raise ValueError(
            f"unknown reward_normalization {reward_normalization!r}; valid: {', '.join(NORMALIZATION_CHOICES)}"
        )
    if reward_normalization != "none" and name in mo_env_names():
        raise ValueError(
            f"reward_normalization {reward_normalization!r} scales scalar rewards; {name} has a reward "
            "vector (leave it at none)"
        )
    env = _build(name, seed, protocol, max_episode_steps, num_tasks, envs_per_task, eval, reward_function_version)
    if reward_normalization != "none" and not eval:
        env.reward_normalizer = RewardNormalizer(env.num_tasks, reward_normalization)
    return env


def _build(name, seed, protocol, max_episode_steps, num_tasks, envs_per_task, eval, reward_function_version):
    if name == "point_mass" or name in mo_env_names():
        if reward_function_version != "v2":
            raise ValueError(
                f"reward_function_version {reward_function_version!r} exists for Meta-World only; "
                f"{name} has one reward function (leave it at v2)"
            )
    if name in mo_env_names():
        return MOGymnasiumVecEnv(
            name, seed=seed, envs_per_task=envs_per_task, max_episode_steps=max_episode_steps, eval=eval
        )
    if name == "point_mass":
        kwargs = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
        return PointMassEnv(
            num_tasks=4 if num_tasks is None else num_tasks, envs_per_task=envs_per_task, seed=seed, **kwargs
        )
    if name in ("mt10", "mt50") or name.startswith("mt1:"):
        if name.startswith("mt1:") and name[4:] not in mt1_task_names():
            raise ValueError(
                f"unknown Meta-World task {name[4:]!r} in {name!r}; valid tasks: {', '.join(mt1_task_names())}"
            )
        return MetaWorldVecEnv(
            name,
            seed=seed,
            protocol=protocol,
            max_episode_steps=max_episode_steps,
            envs_per_task=envs_per_task,
            eval=eval,
            reward_function_version=reward_function_version,
        )
    raise ValueError(f"unknown env {name!r}; valid names: {', '.join(available_envs())}")


__all__ = [
    "MultiTaskVecEnv",
    "PROTOCOLS",
    "available_envs",
    "default_eval_episodes",
    "evaluate_policy",
    "evaluate_preferences",
    "make_env",
    "mo_env_names",
    "reference_point",
]
