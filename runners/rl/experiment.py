"""Multi-task RL (``morl train``) as an experiment of the shell: MT-SAC with a gradient
aggregator on a multi-task vector environment (Meta-World MT10/MT50/MT1, point-mass).

``step()`` is one iteration of the vector environment (``runners/rl/iteration.py``); the
state between two steps is a :class:`~morl.runners.rl.session.Session`. Divergence is never
silent: skipped (non-finite) updates are reported at each log point, the run stops with exit
status 3 and one line (step, last good checkpoint, what to try) once
``run.max_nonfinite_updates`` updates in a row were skipped, and NaN/inf actions stop it at
once instead of reaching the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from morl.runners.divergence import Diverged, NonFiniteOutput, advice, checkpoint_text, streak_text, warn_skipped
from morl.runners.rl.config import RLConfig, load_rl_config
from morl.runners.rl.metrics import per_task
from morl.runners.shell.experiment import Experiment, Schedule

# `morl resume` may change these; everything else is fixed by the checkpoint.
RESUMABLE_KEYS = (
    "total_steps",
    "eval_every",
    "eval_episodes",
    "log_every",
    "checkpoint_every",
    "checkpoint_minutes",
    "keep_checkpoints",
    "device",
)


class RLExperiment(Experiment):
    kind = "rl"
    command = "train"
    unit = "step"
    resume_keys = tuple(f"run.{k}" for k in RESUMABLE_KEYS)
    device_key = "run.device"
    config_class = RLConfig
    snapshot_excludes = ("replay",)

    def __init__(self, cfg: RLConfig, *, for_evaluation: bool = False) -> None:
        from morl.runners.rl.metrics import AggregationTimer, SectionTimer
        from morl.runners.rl.session import CHECKPOINT_FORMAT, build_evaluation, build_session

        self.cfg = cfg
        self.checkpoint_format = CHECKPOINT_FORMAT
        print(f"morl: building the {cfg.env.name} environments and the agent ...", flush=True)
        self.s = build_evaluation(cfg) if for_evaluation else build_session(cfg)
        self.map_location = self.s.device
        self.timer = SectionTimer()
        self.agg_timer = None if for_evaluation else AggregationTimer(self.s.aggregator, self.s.device)

    @classmethod
    def load_config(cls, path, overrides):
        return load_rl_config(path, overrides)

    @property
    def position(self) -> int:
        return self.s.step

    @property
    def name(self) -> str:
        return self.cfg.run.name or "train"

    @property
    def out_dir(self) -> str:
        return self.cfg.run.out_dir

    @property
    def schedule(self) -> Schedule:
        run = self.cfg.run
        return Schedule(
            run.total_steps,
            run.log_every,
            run.eval_every,
            run.checkpoint_every,
            run.checkpoint_minutes,
            run.keep_checkpoints,
        )

    @property
    def task_names(self) -> list[str]:
        return list(self.s.eval_env.task_names)

    @property
    def eta_reliable(self) -> bool:
        return self.s.step > self.cfg.run.warmup_steps  # the warm-up's random actions run far faster

    def step(self) -> None:
        from morl.runners.rl.iteration import iterate

        try:
            iterate(self.s, self.timer, self.agg_timer)  # 1. collect, 2. store, 3. sample, 4. update
        except NonFiniteOutput as exc:  # raised before the env saw the actions; s.step not advanced
            raise self._diverged(self.s.step + 1, str(exc), good_before=self.s.step) from None

    def log_metrics(self) -> dict[str, Any]:
        from morl.runners.rl.metrics import interval_metrics

        s = self.s
        record = interval_metrics(s.task_names, s.stats, self.timer, self.agg_timer)
        s.stats.reset_interval()
        self.timer.reset()
        self.agg_timer.reset()
        return record

    def progress_fields(self, record: dict[str, Any]) -> dict[str, Any]:
        tps = record.get("perf/transitions_per_s")
        return {} if tps is None else {"tps": tps}

    def evaluate(
        self, episodes: int | None = None, video: str | None = None, video_episodes: int = 1, **options: Any
    ) -> dict[str, Any]:
        from morl.runners.rl.iteration import eval_episodes, evaluate_agent

        s = self.s
        result = evaluate_agent(s.agent, s.eval_env, s.device, episodes or eval_episodes(s.cfg))
        names = result["task_names"]
        success = per_task(result["success"], names)
        ret = per_task(result["return"], names)
        out = {"eval/success": success, "eval/return": ret, "headline": success["mean"]}
        if video is not None:  # `morl eval --video RUN_DIR`: video files and TensorBoard videos
            from morl.runners.video import record_agent_videos

            out["videos"] = [
                str(p)
                for p in record_agent_videos(s.agent, s.eval_env, s.device, video, self.unit, s.step, video_episodes)
            ]
        if self.agg_timer is None:  # `morl eval`: a checkpoint, not a run in progress
            return {**out, "episodes_per_task": episodes or eval_episodes(s.cfg)}
        best = (
            success["mean"] if np.isnan(s.stats.best_eval_success) else max(s.stats.best_eval_success, success["mean"])
        )
        s.stats.best_eval_success = best
        s.stats.last_eval = {"step": s.step, "success": success, "return": ret}
        return {**out, "eval/success/best_mean": best}

    def summary(self, metrics: dict[str, Any]) -> str:
        if "eval/success" not in metrics:
            return ""
        best = metrics.get("eval/success/best_mean")
        best_text = "" if best is None else f" (best {best:.3f})"
        return f"eval success {metrics['eval/success']['mean']:.3f}{best_text}, return {metrics['eval/return']['mean']:.1f}"

    def final_metrics(self) -> dict[str, Any]:
        last = self.s.stats.last_eval or {}
        out = {"step": self.s.step, "updates": self.s.updates, "best_mean_success": self.s.stats.best_eval_success}
        if last:
            out.update(
                {"eval/success": last["success"], "eval/return": last["return"], "headline": last["success"]["mean"]}
            )
        return out

    def watch(self) -> str | None:
        """Report skipped updates since the last report; stop once too many came in a row.

        One device->host read of the agent's three counters, at log and checkpoint points only.
        """
        s, limit = self.s, self.cfg.run.max_nonfinite_updates
        agent = s.agent
        total, streak, longest = (
            int(v)
            for v in torch.stack([agent.nonfinite_updates, agent.nonfinite_streak, agent.nonfinite_longest]).tolist()
        )
        line = warn_skipped(total, s.stats.skipped_reported, s.updates - s.stats.updates_reported)
        s.stats.skipped_reported, s.stats.updates_reported = total, s.updates
        if longest >= limit:
            what = streak_text(longest, "run.max_nonfinite_updates", limit, total, s.updates)
            raise self._diverged(s.step, what, self._streak_start(streak, limit))
        return None if line is None else f"step {s.step}: {line}"

    def _streak_start(self, streak: int, limit: int) -> int | None:
        """The step of the last update fully taken before the current streak: checkpoints written
        before it are good (that update may be the one that blew the networks up, and the first
        skipped update may have taken some of its steps, e.g. the critic's).

        None when the long streak is over (its start is no longer known: the newest checkpoint is named).
        """
        if streak < limit:
            return None
        from morl.runners.rl.schedule import step_of_update

        run = self.cfg.run
        last_taken = max(self.s.updates - streak - 1, 0)
        return step_of_update(last_taken, run.warmup_steps, run.updates_per_step, run.warmup_catch_up)

    def skipped_updates(self) -> tuple[int, int]:
        return int(self.s.agent.nonfinite_updates), self.s.updates

    def divergence_advice(self) -> str:
        clip = "agent.grad_clip" if self.cfg.agent.grad_clip is None else None
        return advice("agent.actor_lr, agent.critic_lr, agent.alpha_lr", clip)

    def _diverged(self, step: int, what: str, good_before: int | None) -> Diverged:
        from morl.runners.run_dir import CHECKPOINT_DIR

        where = checkpoint_text(Path(self.run_dir or ".") / CHECKPOINT_DIR, good_before)
        return Diverged(
            f"training diverged at step {step}/{self.cfg.run.total_steps}: {what}; {where}; {self.divergence_advice()}"
        )

    def state_dict(self) -> dict[str, Any]:
        from morl.runners.rl.session import session_state

        return session_state(self.s)

    def load_state_dict(self, state: dict[str, Any], *, for_evaluation: bool = False) -> None:
        from morl.runners.rl.session import agent_state_for, load_session_state

        if for_evaluation:
            same_device = state.get("device_type") == self.s.device.type
            self.s.agent.load_state_dict(agent_state_for(self.s.agent, state, same_device))
            self.s.step = int(state["step"])
            return
        load_session_state(self.s, state)

    def close(self) -> None:
        if self.agg_timer is not None:
            self.agg_timer.close()
