"""Multi-task RL (``morl train``) as an experiment of the shell: MT-SAC with a gradient
aggregator on a multi-task vector environment (Meta-World MT10/MT50/MT1, point-mass).

``step()`` is one iteration of the vector environment (``runners/rl/iteration.py``); the
state between two steps is a :class:`~morl.runners.rl.session.Session`. Schedule and divergence
are both SAC kinds' (``runners/rl/sac_experiment.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from morl.runners.rl.config import RLConfig, load_rl_config
from morl.runners.rl.metrics import per_task
from morl.runners.rl.sac_experiment import SACExperiment

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


class RLExperiment(SACExperiment):
    kind = "rl"
    resume_keys = tuple(f"run.{k}" for k in RESUMABLE_KEYS)
    config_class = RLConfig
    default_name = "train"
    building = "the agent"

    def __init__(self, cfg: RLConfig, *, for_evaluation: bool = False) -> None:
        from morl.runners.rl.metrics import AggregationTimer

        super().__init__(cfg, for_evaluation=for_evaluation)
        self.agg_timer = None if for_evaluation else AggregationTimer(self.s.aggregator, self.s.device)

    def build_session(self, cfg: RLConfig, for_evaluation: bool):
        from morl.runners.rl.session import CHECKPOINT_FORMAT, build_evaluation, build_session

        self.checkpoint_format = CHECKPOINT_FORMAT
        return build_evaluation(cfg) if for_evaluation else build_session(cfg)

    @classmethod
    def load_config(cls, path, overrides):
        return load_rl_config(path, overrides)

    @property
    def task_names(self) -> list[str]:
        return list(self.s.eval_env.task_names)

    @property
    def warmup_catch_up(self) -> bool:
        return self.cfg.run.warmup_catch_up

    def iterate(self) -> None:
        from morl.runners.rl.iteration import iterate

        iterate(self.s, self.timer, self.agg_timer)  # 1. collect, 2. store, 3. sample, 4. update

    def log_metrics(self) -> dict[str, Any]:
        from morl.runners.rl.metrics import interval_metrics

        s = self.s
        record = interval_metrics(s.task_names, s.stats, self.timer, self.agg_timer)
        s.stats.reset_interval()
        self.timer.reset()
        self.agg_timer.reset()
        return record

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
        stats = self.s.stats
        out = {"step": self.s.step, "updates": self.s.updates, "best_mean_success": stats.best_eval_success}
        out["train_seconds"] = dict(stats.train_seconds)
        if last:
            out.update(
                {"eval/success": last["success"], "eval/return": last["return"], "headline": last["success"]["mean"]}
            )
        return out

    def state_dict(self) -> dict[str, Any]:
        from morl.runners.rl.session import session_state

        return session_state(self.s)

    def restore(self, state: dict[str, Any]) -> None:
        from morl.runners.rl.session import load_session_state

        load_session_state(self.s, state)

    def close(self) -> None:
        if self.agg_timer is not None:
            self.agg_timer.close()
