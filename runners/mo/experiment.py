"""Multi-objective RL (``morl train`` on an ``mo`` config) as an experiment of the shell: MO-SAC's
population of P policies on an MO-Gymnasium task, its front evaluated every ``run.eval_every`` steps.

``step()`` is one step of the P sub-envs plus the updates (``runners/mo/session.py``); an
evaluation scores the population's front (``runners/mo/front.py``) and draws it into
TensorBoard. Schedule and divergence are both SAC kinds' (``runners/rl/sac_experiment.py``): skipped
updates are reported, a long streak stops the run with exit status 3, NaN/inf actions stop it at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from morl.runners.errors import UserError
from morl.runners.mo.config import MOConfig, load_mo_config
from morl.runners.mo.front import by_objective
from morl.runners.rl.metrics import UPDATE_TAGS as SAC_TAGS
from morl.runners.rl.sac_experiment import SACExperiment

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
# update() metric -> tag: MT-SAC's tags and MO-SAC's own minimum cosine between objectives; [P, M]
# metrics are logged as tag/p<i>/<objective>, [P] ones as tag/p<i>
UPDATE_TAGS = {**SAC_TAGS, "grad_cos": "grad/cos_min"}
SCALARS = ("nonfinite_updates", "nonfinite_streak")


class MOExperiment(SACExperiment):
    kind = "mo"
    resume_keys = RESUMABLE_KEYS
    config_class = MOConfig
    default_name = "mo"

    @property
    def building(self) -> str:
        return "the preference-conditioned MO-SAC" if self.cfg.agent.conditioned else "the MO-SAC population"

    def build_session(self, cfg: MOConfig, for_evaluation: bool):
        from morl.runners.mo.session import CHECKPOINT_FORMAT, build_session

        self.checkpoint_format = CHECKPOINT_FORMAT
        return build_session(cfg, for_evaluation=for_evaluation)

    @classmethod
    def load_config(cls, path, overrides):
        return load_mo_config(path, overrides)

    @property
    def task_names(self) -> list[str]:
        return [f"p{i}" for i in range(self.s.agent.population)]

    def iterate(self) -> None:
        from morl.runners.mo.session import iterate

        iterate(self.s, self.timer)

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
        """A flat interval mean back in its shape: ``[P, M]`` per objective and policy, ``[P]`` per
        policy; a conditioned agent's ``[M]`` per objective."""
        p, m = self.s.agent.population, len(names)
        if key in SCALARS or values.size == 1:
            return {tag: float(values.mean())}
        if self.s.agent.conditioned:  # one policy: [M] per objective
            return {f"{tag}/{name}": float(v) for name, v in zip(names, values.reshape(-1))}
        if values.size == p * m:
            return by_objective(tag, values.reshape(p, m), names)
        return {tag: {f"p{i}": float(v) for i, v in enumerate(values.reshape(-1))}}

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
        stats = self.s.stats
        out = {"step": self.s.step, "updates": self.s.updates, "eval/hv_best": stats.best_hv}
        out["train_seconds"] = dict(stats.train_seconds)  # MORL-Baselines' runs (tools/) write the same key
        return {**out, **(stats.last_eval or {})}

    def load_state_dict(self, state: dict[str, Any], *, for_evaluation: bool = False) -> None:
        """``morl resume`` and ``morl eval``: a checkpoint of another population is one line."""
        from morl.agents.rl.mosac import IncompatibleState

        try:
            super().load_state_dict(state, for_evaluation=for_evaluation)
        except IncompatibleState as exc:
            raise UserError(f"checkpoint: {exc}") from None

    def state_dict(self) -> dict[str, Any]:
        from morl.runners.mo.session import session_state

        return session_state(self.s)

    def restore(self, state: dict[str, Any]) -> None:
        from morl.runners.mo.session import load_session_state

        load_session_state(self.s, state)
