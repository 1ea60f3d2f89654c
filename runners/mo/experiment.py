"""Multi-objective RL (``morl train`` on an ``mo`` config) as an experiment of the shell: MO-SAC's
population of P policies on an MO-Gymnasium task, its front evaluated every ``run.eval_every`` steps.

``step()`` is one step of the P sub-envs plus the updates (``runners/mo/session.py``); an
evaluation scores the population's front (``runners/mo/front.py``) and draws it into
TensorBoard. Divergence is handled as in ``morl train`` on Meta-World: skipped updates are
reported, a long streak stops the run with exit status 3, NaN/inf actions stop it at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from morl.runners.divergence import Diverged, NonFiniteOutput, advice, checkpoint_text, streak_text, warn_skipped
from morl.runners.mo.config import MOConfig, load_mo_config
from morl.runners.mo.front import by_objective
from morl.runners.shell.experiment import Experiment, Schedule

# `morl resume` may change these; everything else is fixed by the checkpoint.
RESUMABLE_KEYS = (
    "run.total_steps",
    "run.eval_every",
    "run.log_every",
    "run.checkpoint_every",
    "run.checkpoint_minutes",
    "run.keep_checkpoints",
    "run.device",
    "front.episodes",
)
# update() metric -> tag; [P, M] metrics are logged as tag/p<i>/<objective>, [P] ones as tag/p<i>
UPDATE_TAGS = {
    "actor_loss": "loss/actor",
    "critic_loss": "loss/critic",
    "alpha_loss": "loss/alpha",
    "alpha": "alpha",
    "entropy": "entropy",
    "agg_weights": "aggregator/weight",
    "grad_cos": "grad/cos_min",
    "nonfinite_updates": "train/skipped_nonfinite_updates",
    "nonfinite_streak": "train/nonfinite_streak",
}
SCALARS = ("nonfinite_updates", "nonfinite_streak")


class MOExperiment(Experiment):
    kind = "mo"
    command = "train"
    unit = "step"
    resume_keys = RESUMABLE_KEYS
    device_key = "run.device"
    config_class = MOConfig
    snapshot_excludes = ("replay",)

    def __init__(self, cfg: MOConfig, *, for_evaluation: bool = False) -> None:
        from morl.runners.mo.session import CHECKPOINT_FORMAT, build_session
        from morl.runners.rl.metrics import SectionTimer

        self.cfg, self.for_evaluation = cfg, for_evaluation
        self.checkpoint_format = CHECKPOINT_FORMAT
        print(f"morl: building the {cfg.env.name} environments and the MO-SAC population ...", flush=True)
        self.s = build_session(cfg, for_evaluation=for_evaluation)
        self.map_location = self.s.device
        self.timer = SectionTimer()

    @classmethod
    def load_config(cls, path, overrides):
        return load_mo_config(path, overrides)

    @property
    def position(self) -> int:
        return self.s.step

    @property
    def name(self) -> str:
        return self.cfg.run.name or "mo"

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
        return [f"p{i}" for i in range(self.s.agent.population)]

    @property
    def eta_reliable(self) -> bool:
        return self.s.step > self.cfg.run.warmup_steps

    def step(self) -> None:
        from morl.runners.mo.session import iterate

        try:
            iterate(self.s, self.timer)
        except NonFiniteOutput as exc:  # raised before the env saw the actions
            raise self._diverged(self.s.step + 1, str(exc), good_before=self.s.step) from None

    def log_metrics(self) -> dict[str, Any]:
        s, names = self.s, self.s.objective_names
        record: dict[str, Any] = {}
        returns = s.stats.episode_returns()
        if not np.isnan(returns).all():
            record.update(by_objective("train/episode_return", np.nan_to_num(returns, nan=0.0), names))
        for key, values in s.stats.update_means().items():
            record.update(self._shaped(UPDATE_TAGS.get(key, f"train/{key}"), key, values, names))
        elapsed = max(self.timer.elapsed(), 1e-9)
        record.update({
            "perf/transitions_per_s": s.stats.transitions / elapsed,
            "perf/updates_per_s": s.stats.update_count / elapsed,
            "perf/env_fraction": self.timer.seconds.get("env", 0.0) / elapsed,
            "perf/update_fraction": self.timer.seconds.get("update", 0.0) / elapsed,
        })  # fmt: skip
        s.stats.reset_interval()
        self.timer.reset()
        return record

    def _shaped(self, tag: str, key: str, values: np.ndarray, names: list[str]) -> dict[str, Any]:
        """A flat interval mean back in its shape: ``[P, M]`` per objective and policy, ``[P]`` per policy."""
        p, m = self.s.agent.population, len(names)
        if key in SCALARS:
            return {tag: float(values.mean())}
        if values.size == p * m:
            return by_objective(tag, values.reshape(p, m), names)
        return {tag: {f"p{i}": float(v) for i, v in enumerate(values.reshape(-1))}}

    def progress_fields(self, record: dict[str, Any]) -> dict[str, Any]:
        tps = record.get("perf/transitions_per_s")
        return {} if tps is None else {"tps": tps}

    def evaluate(self, episodes: int | None = None, **options: Any) -> dict[str, Any]:
        from morl.runners.mo.front import evaluation_metrics

        s = self.s
        out = evaluation_metrics(s, episodes, figure=not self.for_evaluation)
        if self.for_evaluation:  # `morl eval`: a checkpoint, not a run in progress
            return {**out, "episodes_per_policy": episodes or self.cfg.front.episodes}
        hv = out["eval/hv"]
        s.stats.best_hv = hv if s.stats.best_hv is None else max(s.stats.best_hv, hv)
        s.stats.last_eval = {k: v for k, v in out.items() if k != "figures"}
        return {**out, "eval/hv_best": s.stats.best_hv}

    def summary(self, metrics: dict[str, Any]) -> str:
        if "eval/hv" not in metrics:
            return ""
        return (
            f"eval hv {metrics['eval/hv']:.4g}, eum {metrics['eval/eum']:.4g}, "
            f"front {int(metrics['eval/cardinality'])}/{self.s.agent.population} policies"
        )

    def final_metrics(self) -> dict[str, Any]:
        out = {"step": self.s.step, "updates": self.s.updates, "eval/hv_best": self.s.stats.best_hv}
        return {**out, **(self.s.stats.last_eval or {})}

    def watch(self) -> str | None:
        """Report skipped updates since the last report; stop once too many came in a row (one host read)."""
        s, limit, agent = self.s, self.cfg.run.max_nonfinite_updates, self.s.agent
        counters = torch.stack([agent.nonfinite_updates, agent.nonfinite_streak, agent.nonfinite_longest]).tolist()
        total, streak, longest = (int(v) for v in counters)
        line = warn_skipped(total, s.stats.skipped_reported, s.updates - s.stats.updates_reported)
        s.stats.skipped_reported, s.stats.updates_reported = total, s.updates
        if longest >= limit:
            what = streak_text(longest, "run.max_nonfinite_updates", limit, total, s.updates)
            raise self._diverged(s.step, what, self._streak_start(streak, limit))
        return None if line is None else f"step {s.step}: {line}"

    def _streak_start(self, streak: int, limit: int) -> int | None:
        """The step of the last update fully taken before the current streak (checkpoints before it
        are good); None when the long streak is over (the newest checkpoint is named)."""
        if streak < limit:
            return None
        from morl.runners.rl.schedule import step_of_update

        run = self.cfg.run
        return step_of_update(max(self.s.updates - streak - 1, 0), run.warmup_steps, run.updates_per_step, False)

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
        from morl.runners.mo.session import session_state

        return session_state(self.s)

    def load_state_dict(self, state: dict[str, Any], *, for_evaluation: bool = False) -> None:
        from morl.runners.mo.session import agent_state_for, load_session_state

        if for_evaluation:
            same_device = state.get("device_type") == self.s.device.type
            self.s.agent.load_state_dict(agent_state_for(self.s.agent, state, same_device))
            self.s.step = int(state["step"])
            return
        load_session_state(self.s, state)
