"""The RL training loop: collect -> store -> sample -> update -> log -> evaluate -> checkpoint.

One iteration ("step") steps every sub-env of the vector env once, stores the transitions
(``final_obs`` as next observation, bootstrapping through time-limit truncations), then runs
``updates_per_step`` MT-SAC updates on a batch with the same number of transitions per task.
Update metrics stay on the device and are read back once per ``log_every`` steps.

Divergence is never silent: skipped (non-finite) updates are reported at each log point, the
run stops with exit status 3 and one line (step, last good checkpoint, what to try) once
``run.max_nonfinite_updates`` updates in a row were skipped, and NaN/inf actions stop it at
once instead of reaching the environment (``morl.runners.divergence``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from morl.runners.divergence import Diverged, NonFiniteOutput, advice, checkpoint_text, streak_text, warn_skipped
from morl.runners.interrupts import Interrupted, deferred_stop
from morl.runners.progress import Progress
from morl.runners.rl.metrics import AggregationTimer, SectionTimer, write_log
from morl.runners.rl.session import Session, save_checkpoint

NONFINITE_ACTIONS = "the policy's actions are NaN/inf (its network overflowed)"


def collect_action(s: Session) -> np.ndarray:
    """Uniform random actions during warm-up, then a sample from the policy."""
    if s.step < s.cfg.run.warmup_steps:
        return s.action_rng.uniform(-1.0, 1.0, size=(s.env.num_envs, s.env.single_action_space.shape[0])).astype(np.float32)
    with torch.no_grad():
        action = s.agent.act(torch.as_tensor(s.obs, device=s.device), deterministic=False)
    return _finite_actions(action.cpu().numpy())


def _finite_actions(action: np.ndarray) -> np.ndarray:
    # The actions come to the host anyway: checking them here costs no extra synchronisation.
    if not np.isfinite(action).all():
        raise NonFiniteOutput(NONFINITE_ACTIONS)
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
            return _finite_actions(agent.act(torch.as_tensor(obs, device=device), deterministic=True).cpu().numpy())

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
    if s.step > run.warmup_steps:
        with timer("update"):
            for _ in range(run.updates_per_step):
                # on CUDA the aggregation is timed (with a sync) once per log interval
                diagnostic = s.step % run.log_every == 0
                agg_timer.sample_next = diagnostic
                batch = s.replay.sample(s.per_task_batch, s.sample_gen)
                s.stats.add_update(s.agent.update(batch, s.updates, diagnostics=diagnostic))
                s.updates += 1


def train(s: Session, run_dir: Path, logger, progress: bool | None = None) -> dict[str, Any]:
    """Run from ``s.step`` to ``run.total_steps``; returns the last evaluation."""
    run = s.cfg.run
    bar = Progress(run.total_steps, initial=s.step, desc=run.name or "train", enabled=progress)
    timer, agg_timer = SectionTimer(), AggregationTimer(s.aggregator, s.device)
    with deferred_stop() as stop:
        try:
            _loop(s, run_dir, logger, bar, timer, agg_timer, stop)
        except Diverged as exc:
            bar.close()  # the line goes below the bar, not into it
            exc.report()
            raise
        finally:
            agg_timer.close()
            bar.close()
            logger.flush()
    return s.stats.last_eval or {}


def _loop(s: Session, run_dir: Path, logger, bar: Progress, timer, agg_timer, stop) -> None:
    run = s.cfg.run
    while s.step < run.total_steps:
        try:
            iterate(s, timer, agg_timer)  # 1. collect, 2. store, 3. sample, 4. update
        except NonFiniteOutput as exc:  # raised before the env saw the actions; s.step not advanced
            raise _diverged(s, run_dir, s.step + 1, str(exc), good_before=s.step) from None
        # 5. log
        if s.step % run.log_every == 0 or s.step == run.total_steps:
            record = write_log(logger, s.step, s.task_names, s.stats, timer, agg_timer)
            bar.show(tps=record["perf/transitions_per_s"])
            _watch_nonfinite(s, run_dir, bar)
            bar.heartbeat(s.step, estimate=s.step > run.warmup_steps)
            s.stats.reset_interval()
            timer.reset()
            agg_timer.reset()
        # 6. evaluate
        if s.step % run.eval_every == 0 or s.step == run.total_steps:
            try:
                _evaluate_and_log(s, logger, bar)
            except NonFiniteOutput as exc:
                raise _diverged(s, run_dir, s.step, f"in evaluation, {exc}", good_before=s.step) from None
        # 7. checkpoint (also when asked to stop; a signal after this read waits for the next step)
        stopping = stop.requested
        if s.step % run.checkpoint_every == 0 or s.step == run.total_steps or stopping:
            _watch_nonfinite(s, run_dir, bar)  # never write a diverged state over the last good one
            path = save_checkpoint(s, run_dir)
        bar.advance()
        if stopping:
            raise Interrupted(f"stopped by {stop.signal_name} at step {s.step}/{run.total_steps}; checkpoint "
                              f"{path}; continue with: morl resume {run_dir}")


def _watch_nonfinite(s: Session, run_dir: Path, bar: Progress) -> None:
    """Report skipped updates since the last report; stop once too many came in a row.

    One device->host read of the agent's three counters, at log and checkpoint points only.
    """
    agent, limit = s.agent, s.cfg.run.max_nonfinite_updates
    total, streak, longest = (int(v) for v in torch.stack(
        [agent.nonfinite_updates, agent.nonfinite_streak, agent.nonfinite_longest]).tolist())
    line = warn_skipped(total, s.stats.skipped_reported, s.updates - s.stats.updates_reported)
    s.stats.skipped_reported, s.stats.updates_reported = total, s.updates
    if line is not None:
        bar.show(skipped=total)
        bar.message(f"step {s.step}: {line}")
    if longest >= limit:
        what = streak_text(longest, "run.max_nonfinite_updates", limit, total, s.updates)
        raise _diverged(s, run_dir, s.step, what, _streak_start(s, streak, limit))


def _streak_start(s: Session, streak: int, limit: int) -> int | None:
    """The step of the last update fully taken before the current streak: checkpoints written
    before it are good (that update may be the one that blew the networks up, and the first
    skipped update may have taken some of its steps, e.g. the critic's).

    None when the long streak is over (its start is no longer known: the newest checkpoint is named).
    """
    if streak < limit:
        return None
    run = s.cfg.run
    last_taken = max(s.updates - streak - 1, 0)
    return run.warmup_steps + 1 + last_taken // run.updates_per_step


def _diverged(s: Session, run_dir: Path, step: int, what: str, good_before: int | None) -> Diverged:
    from morl.runners.run_dir import CHECKPOINT_DIR

    agent = s.cfg.agent
    tip = advice("agent.actor_lr, agent.critic_lr, agent.alpha_lr", "agent.grad_clip" if agent.grad_clip is None else None)
    where = checkpoint_text(Path(run_dir) / CHECKPOINT_DIR, good_before)
    return Diverged(f"training diverged at step {step}/{s.cfg.run.total_steps}: {what}; {where}; {tip}")


def _evaluate_and_log(s: Session, logger, bar: Progress) -> None:
    result = evaluate(s)
    names = result["task_names"]
    success = logger.per_task("eval/success", result["success"], names, s.step)
    ret = logger.per_task("eval/return", result["return"], names, s.step)
    best = success["mean"] if np.isnan(s.stats.best_eval_success) else max(s.stats.best_eval_success, success["mean"])
    s.stats.best_eval_success = best
    logger.scalar("eval/success/best_mean", best, s.step)
    s.stats.last_eval = {"step": s.step, "success": success, "return": ret}
    logger.record(s.step, kind="eval", **{"eval/success": success, "eval/return": ret, "eval/success/best_mean": best})
    logger.flush()
    bar.show(eval=success["mean"], best=best)
    bar.message(f"step {s.step}: eval success {success['mean']:.3f} (best {best:.3f}), return {ret['mean']:.1f}")
