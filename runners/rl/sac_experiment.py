"""What the shell sees of both SAC kinds alike (``rl``: MT-SAC, ``mo``: MO-SAC): a run of
``run.total_steps`` steps of a vector environment, scheduled by the ``run:`` section
(``runners/rl/run_section.py``), with a warm-up of random actions.

Divergence is never silent: skipped (non-finite) updates are reported at each log point, the run
stops with exit status 3 and one line (step, last good checkpoint, what to try) once
``run.max_nonfinite_updates`` updates in a row were skipped, and NaN/inf actions stop it at once
instead of reaching the environment.

A kind builds its session (``build_session``: ``step``, ``updates``, ``device``, an ``agent`` with
the three non-finite counters, ``stats`` with ``skipped_reported``/``updates_reported``), steps it
(``iterate``) and saves and restores it (``state_dict``, ``restore``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import torch

from morl.runners.divergence import Diverged, NonFiniteOutput, advice, checkpoint_text, streak_text, warn_skipped
from morl.runners.shell.experiment import Experiment, Schedule


class SACExperiment(Experiment):
    command = "train"
    unit = "step"
    device_key = "run.device"
    snapshot_excludes = ("replay",)
    default_name: ClassVar[str]  # the run's name when its config names none
    building: ClassVar[str]  # what is built besides the environments (said while building)

    def __init__(self, cfg: Any, *, for_evaluation: bool = False) -> None:
        from morl.runners.rl.metrics import SectionTimer

        self.cfg, self.for_evaluation = cfg, for_evaluation
        print(f"morl: building the {cfg.env.name} environments and {self.building} ...", flush=True)
        self.s = self.build_session(cfg, for_evaluation)
        self.map_location = self.s.device
        self.timer = SectionTimer()

    # ----- the kind's own ------------------------------------------------------------------
    def build_session(self, cfg: Any, for_evaluation: bool) -> Any:
        """The session (no training env and replay ``for_evaluation``); sets ``checkpoint_format``."""
        raise NotImplementedError

    def iterate(self) -> None:
        """One step of the session: collect, store, update."""
        raise NotImplementedError

    def restore(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()`` to continue the run."""
        raise NotImplementedError

    @property
    def warmup_catch_up(self) -> bool:
        """Whether the first learning step makes up the warm-up's updates (``runners/rl/schedule.py``)."""
        return False

    # ----- the shell's -----------------------------------------------------------------------
    @property
    def position(self) -> int:
        return self.s.step

    @property
    def name(self) -> str:
        return self.cfg.run.name or self.default_name

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
    def eta_reliable(self) -> bool:
        return self.s.step > self.cfg.run.warmup_steps  # the warm-up's random actions run far faster

    def step(self) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            self.iterate()
        except NonFiniteOutput as exc:  # raised before the env saw the actions; s.step not advanced
            raise self._diverged(self.s.step + 1, str(exc), good_before=self.s.step) from None
        spent = self.s.stats.train_seconds  # what `final_metrics` reports: evaluations and checkpoints excluded
        spent["cpu"] += time.process_time() - cpu
        spent["wall"] += time.perf_counter() - wall

    def progress_fields(self, record: dict[str, Any]) -> dict[str, Any]:
        tps = record.get("perf/transitions_per_s")
        return {} if tps is None else {"tps": tps}

    def load_state_dict(self, state: dict[str, Any], *, for_evaluation: bool = False) -> None:
        if not for_evaluation:
            self.restore(state)
            return
        from morl.runners.rl.session import agent_state_for

        same_device = state.get("device_type", self.s.device.type) == self.s.device.type  # as `load_session_state`
        self.s.agent.load_state_dict(agent_state_for(self.s.agent, state, same_device))
        self.s.step = int(state["step"])

    # ----- divergence ------------------------------------------------------------------------
    def watch(self) -> str | None:
        """Report skipped updates since the last report; stop once too many came in a row.

        One device->host read of the agent's three counters, at log and checkpoint points only.
        """
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
        return step_of_update(last_taken, run.warmup_steps, run.updates_per_step, self.warmup_catch_up)

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
