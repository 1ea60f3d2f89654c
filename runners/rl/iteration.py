"""One RL iteration: collect -> store -> sample -> update (the shell logs, evaluates, checkpoints).

One iteration ("step") steps every sub-env of the vector env once, stores the transitions
(``final_obs`` as next observation, bootstrapping through time-limit truncations), then runs
``updates_per_step`` MT-SAC updates on a batch with the same number of transitions per task.
Update metrics stay on the device and are read back once per ``log_every`` steps. NaN/inf
actions raise ``NonFiniteOutput`` before they reach the environment.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from morl.runners.divergence import NonFiniteOutput
from morl.runners.rl.metrics import AggregationTimer, SectionTimer
from morl.runners.rl.schedule import updates_at
from morl.runners.rl.session import Session

NONFINITE_ACTIONS = "the policy's actions are NaN/inf (its network overflowed)"


def collect_action(s: Session) -> np.ndarray:
    """Uniform random actions during warm-up, then a sample from the policy."""
    if s.step < s.cfg.run.warmup_steps:
        return s.action_rng.uniform(-1.0, 1.0, size=(s.env.num_envs, s.env.single_action_space.shape[0])).astype(
            np.float32
        )
    with torch.no_grad():
        action = s.agent.act(torch.as_tensor(s.obs, device=s.device), deterministic=False)
    return finite_actions(action.cpu().numpy())


def finite_actions(action: np.ndarray, what: str = NONFINITE_ACTIONS) -> np.ndarray:
    """``action``, or ``NonFiniteOutput(what)`` if any entry is NaN/inf."""
    # The actions come to the host anyway: checking them here costs no extra synchronisation.
    if not np.isfinite(action).all():
        raise NonFiniteOutput(what)
    return action


def evaluate(s: Session, episodes_per_task: int | None = None) -> dict[str, Any]:
    """Per-task success and return of the deterministic policy on the session's evaluation env."""
    return evaluate_agent(s.agent, s.eval_env, s.device, episodes_per_task or eval_episodes(s.cfg))


def eval_episodes(cfg) -> int:
    """``run.eval_episodes``, or the protocol's default (mtrl: 1, metaworld_v3: 50)."""
    import morl.envs as envs

    return cfg.run.eval_episodes or envs.default_eval_episodes(cfg.env.protocol)


def evaluate_agent(agent, eval_env, device: torch.device, episodes_per_task: int) -> dict[str, Any]:
    import morl.envs as envs

    def policy(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return finite_actions(agent.act(torch.as_tensor(obs, device=device), deterministic=True).cpu().numpy())

    return envs.evaluate_policy(eval_env, policy, episodes_per_task)


def iterate(s: Session, timer: SectionTimer, agg_timer: AggregationTimer) -> None:
    """One iteration: collect -> store -> sample -> update (also what ``morl bench rl`` times)."""
    run = s.cfg.run
    # 1. collect: one step of every sub-env
    with timer("env"):
        actions = collect_action(s)
        next_obs, reward, terminated, truncated, info = s.env.step(actions)
    # 2. store (final_obs is the true last observation where an episode ended; truncation
    #    by the time limit is not stored as terminal, so the critic bootstraps through it)
    s.replay.add(s.env.task_ids, s.obs, actions, reward, info["final_obs"], terminated)
    s.stats.add_episodes(s.env.task_ids, info, terminated | truncated)
    s.stats.transitions += s.env.num_envs
    s.obs = next_obs
    s.step += 1
    # 3. sample + 4. update
    updates = updates_at(s.step, run.warmup_steps, run.updates_per_step, run.warmup_catch_up)
    if updates:
        with timer("update"):
            for _ in range(updates):
                # on CUDA the aggregation is timed (with a sync) once per log interval
                diagnostic = s.step % run.log_every == 0
                agg_timer.sample_next = diagnostic
                batch = s.replay.sample(s.per_task_batch, s.sample_gen)
                s.stats.add_update(s.agent.update(batch, s.updates, diagnostics=diagnostic))
                s.updates += 1
