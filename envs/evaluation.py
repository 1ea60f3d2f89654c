"""Per-task success rate and return of a deterministic policy on a :class:`MultiTaskVecEnv`, and the
vector returns of a preference-conditioned policy on a multi-objective one (the points of its front)."""

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

    Returns ``{"success": [num_tasks], "return": [num_tasks], "task_names": [...], "episodes": [num_tasks]}``;
    on a multi-objective env ``"return"`` is ``[num_tasks, reward_dim]``.
    """
    if episodes_per_task < 1:
        raise ValueError(f"episodes_per_task must be >= 1, got {episodes_per_task}")
    need = max(1, episodes_per_task // env.envs_per_task)
    n, k = env.num_envs, env.num_tasks
    successes = np.zeros(n)
    objectives = () if env.reward_dim is None else (env.reward_dim,)
    returns = np.zeros((n, *objectives))
    counted = np.zeros(n, np.int64)
    limit = max_steps if max_steps is not None else need * env.max_episode_steps + 1
    obs, _ = env.reset()
    for _ in range(limit):
        actions = np.asarray(policy(obs), dtype=np.float32).reshape(n, -1)
        obs, _, terminated, truncated, info = env.step(actions)
        ended = (terminated | truncated) & (counted < need)
        successes += np.where(ended, info["episode_success"], 0.0)
        returns += np.where(ended.reshape(n, *(1 for _ in objectives)), info["episode_return"], 0.0)
        counted += ended
        if (counted >= need).all():
            break
    else:
        raise RuntimeError(f"evaluation did not finish {need} episode(s) per sub-env within {limit} steps")
    per_task = counted.reshape(k, env.envs_per_task).sum(axis=1)
    return {
        "success": successes.reshape(k, -1).sum(axis=1) / per_task,
        "return": returns.reshape(k, env.envs_per_task, *objectives).sum(axis=1)
        / per_task.reshape(k, *(1 for _ in objectives)),
        "task_names": list(env.task_names),
        "episodes": per_task,
    }


def evaluate_preferences(
    env: MultiTaskVecEnv,
    policy: Callable[[np.ndarray, np.ndarray], np.ndarray],
    weights: np.ndarray,
    episodes_per_weight: int = 1,
    gamma: float = 1.0,
    max_steps: int | None = None,
) -> dict:
    """Mean vector return of ``policy(obs, w)`` for every preference ``w`` of ``weights [W, M]``.

    The sub-envs of the multi-objective ``env`` evaluate ``num_envs`` preferences at once: sub-env
    ``i`` acts with ``policy(obs, w)[i]`` where row ``i`` of ``w [num_envs, M]`` is its preference,
    from ``env.reset()``, until it finished ``episodes_per_weight`` episodes (sub-envs left over by
    the last group repeat its preferences, uncounted). The discounted return is
    ``sum_t gamma^t r_t`` (MORL-Baselines' ``eval_mo``; its fronts use gamma = 0.99).

    Returns ``{"weights": [W, M], "return": [W, M], "discounted_return": [W, M], "episodes": [W]}``:
    the points of the policy's front, undiscounted and discounted.
    """
    if env.reward_dim is None:
        raise ValueError("evaluate_preferences needs a multi-objective env (reward_dim set); use evaluate_policy")
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 2 or weights.shape[1] != env.reward_dim or len(weights) == 0:
        raise ValueError(f"weights must have shape [W >= 1, {env.reward_dim}], got {weights.shape}")
    if episodes_per_weight < 1:
        raise ValueError(f"episodes_per_weight must be >= 1, got {episodes_per_weight}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
    n = env.num_envs
    parts = [
        _evaluate_group(env, policy, weights[start : start + n], episodes_per_weight, gamma, max_steps)
        for start in range(0, len(weights), n)
    ]
    return {
        "weights": weights,
        "return": np.concatenate([p[0] for p in parts]),
        "discounted_return": np.concatenate([p[1] for p in parts]),
        "episodes": np.full(len(weights), episodes_per_weight, np.int64),
    }


def _evaluate_group(env, policy, group: np.ndarray, need: int, gamma: float, max_steps: int | None):
    """Mean (return, discounted return) ``[len(group), M]`` with sub-env ``i`` acting for ``group[i]``."""
    n, k = env.num_envs, len(group)
    prefs = group[np.arange(n) % k]
    counted = np.zeros(n, np.int64)
    counted[k:] = need  # the repeats are never counted
    total, total_disc = np.zeros((n, env.reward_dim)), np.zeros((n, env.reward_dim))
    running_disc, discount = np.zeros((n, env.reward_dim)), np.ones(n)
    limit = max_steps if max_steps is not None else need * env.max_episode_steps + 1
    obs, _ = env.reset()
    for _ in range(limit):
        actions = np.asarray(policy(obs, prefs), dtype=np.float32).reshape(n, -1)
        obs, reward, terminated, truncated, info = env.step(actions)
        running_disc += discount[:, None] * reward
        discount *= gamma
        ended = terminated | truncated
        counts = (ended & (counted < need))[:, None]
        total += np.where(counts, info["episode_return"], 0.0)
        total_disc += np.where(counts, running_disc, 0.0)
        counted += counts[:, 0]
        running_disc[ended], discount[ended] = 0.0, 1.0
        if (counted >= need).all():
            break
    else:
        raise RuntimeError(f"evaluation did not finish {need} episode(s) per preference within {limit} steps")
    return total[:k] / need, total_disc[:k] / need
