"""Per-task success rate and return of a deterministic policy on a :class:`MultiTaskVecEnv`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from morl.envs.vector import MultiTaskVecEnv

PROTOCOL_EVAL_EPISODES = {"mtrl": 1, "metaworld_v3": 50}


def default_eval_episodes(protocol: str) -> int:
    """Evaluation episodes per task of a protocol: 1 for ``mtrl``, 50 for ``metaworld_v3``."""
    if protocol not in PROTOCOL_EVAL_EPISODES:
        raise ValueError(f"unknown protocol {protocol!r}; valid protocols: {', '.join(PROTOCOL_EVAL_EPISODES)}")
    return PROTOCOL_EVAL_EPISODES[protocol]


def evaluate_policy(
    env: MultiTaskVecEnv,
    policy: Callable[[np.ndarray], np.ndarray],
    episodes_per_task: int,
    max_steps: int | None = None,
) -> dict:
    """Run ``policy`` until every sub-env completed ``max(1, episodes_per_task // envs_per_task)`` episodes.

    Starts with ``env.reset()`` (no seed: the env's own generators continue, so repeated
    evaluations on a ``metaworld_v3`` env see new goals). An episode succeeds when the task's
    success criterion held at any of its steps. Sub-envs that are done keep stepping until all
    are (their extra episodes are not counted). ``max_steps`` (default: enough vector steps for
    the requested episodes) guards against a policy that never ends an episode.

    Returns ``{"success": [num_tasks], "return": [num_tasks], "task_names": [...], "episodes": [num_tasks]}``.
    """
    if episodes_per_task < 1:
        raise ValueError(f"episodes_per_task must be >= 1, got {episodes_per_task}")
    need = max(1, episodes_per_task // env.envs_per_task)
    n, k = env.num_envs, env.num_tasks
    successes = np.zeros(n)
    returns = np.zeros(n)
    counted = np.zeros(n, np.int64)
    limit = max_steps if max_steps is not None else need * env.max_episode_steps + 1
    obs, _ = env.reset()
    for _ in range(limit):
        actions = np.asarray(policy(obs), dtype=np.float32).reshape(n, -1)
        obs, _, terminated, truncated, info = env.step(actions)
        ended = (terminated | truncated) & (counted < need)
        successes += np.where(ended, info["episode_success"], 0.0)
        returns += np.where(ended, info["episode_return"], 0.0)
        counted += ended
        if (counted >= need).all():
            break
    else:
        raise RuntimeError(f"evaluation did not finish {need} episode(s) per sub-env within {limit} steps")
    per_task = counted.reshape(k, env.envs_per_task).sum(axis=1)
    return {
        "success": successes.reshape(k, -1).sum(axis=1) / per_task,
        "return": returns.reshape(k, -1).sum(axis=1) / per_task,
        "task_names": list(env.task_names),
        "episodes": per_task,
    }
