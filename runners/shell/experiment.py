"""The protocol every kind of run implements, and its schedule.

The shell calls, in order: ``cls.load_config(path, overrides)`` -> ``cls(cfg)`` (builds
everything, writes nothing) -> optionally ``load_state_dict(torch_load(last.pt))`` -> then, per
unit of work, ``step()`` and at the schedule's points ``log_metrics()``, ``evaluate()``,
``watch()`` and ``state_dict()`` -> at the end ``final_metrics()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar


@dataclass(frozen=True)
class Schedule:
    """When the loop logs, evaluates and checkpoints, in units of the run (steps, epochs, ...)."""

    total: int
    log_every: int
    eval_every: int
    checkpoint_every: int
    checkpoint_minutes: float | None = None  # also checkpoint once this much wall-clock time passed
    keep_snapshots: int = 0  # step_<N>.pt snapshots (state_dict() without snapshot_excludes) kept besides last.pt


class Experiment:
    """One kind of run. Subclasses set the class attributes and implement the methods below.

    ``position`` counts the units done; ``step()`` advances it by one. Metrics are returned as
    ``{tag: float | {name: float}}``; the shell writes them to TensorBoard (``tag`` or
    ``tag/name``) and as one ``metrics.jsonl`` line. Device tensors may be returned: the shell
    reads them back once per log point.
    """

    kind: ClassVar[str]  # "rl", "supervised", "forum", "fl", "prompt": written to run.json
    command: ClassVar[str]  # the `morl` subcommand that starts it
    unit: ClassVar[str] = "step"  # what one step() is: step, epoch, iteration, round
    resume_keys: ClassVar[tuple[str, ...]] = ()  # dotted config keys `morl resume` may change
    config_class: ClassVar[type]
    checkpoint_format: ClassVar[int] = 1  # bump when state_dict() changes incompatibly
    snapshot_excludes: ClassVar[tuple[str, ...]] = ()  # state_dict() keys left out of step_<N>.pt snapshots
    run_dir: Path | None = None  # set by the shell before the first step (for divergence messages)
    map_location: Any = "cpu"  # where checkpoint tensors are loaded to (the run's device)

    device_key: ClassVar[str] = "device"  # the config key `morl eval --device` overrides
    position: int = 0  # units done

    def __init__(self, cfg: Any, *, for_evaluation: bool = False) -> None:
        self.cfg = cfg

    # ----- config -------------------------------------------------------------------------
    @classmethod
    def load_config(cls, path: str | Path, overrides: list[str]) -> Any:
        """The validated config (raise UserError naming the bad key and what is allowed)."""
        from morl.runners.config import load_config

        cfg = load_config(cls.config_class, path, overrides)
        cls.validate(cfg)
        return cfg

    @classmethod
    def validate(cls, cfg: Any) -> None:
        """Check values the schema's types cannot (ranges, combinations)."""

    def config_dict(self) -> dict[str, Any]:
        from morl.runners.config import to_dict

        return to_dict(self.cfg)

    @property
    def name(self) -> str:
        """The run's name (run directories are ``<out_dir>/<name>-<timestamp>``); default: the
        config's top-level ``name``."""
        return self.cfg.name

    @property
    def out_dir(self) -> str:
        """Where new run directories go; default: the config's top-level ``out_dir``."""
        return self.cfg.out_dir

    @property
    def schedule(self) -> Schedule:
        raise NotImplementedError

    # ----- the work -----------------------------------------------------------------------
    def step(self) -> None:
        """Do one unit of work and advance ``position`` by one."""
        raise NotImplementedError

    def log_metrics(self) -> dict[str, Any]:
        """Metrics of the interval since the last log point (training losses, weights, speed)."""
        return {}

    def evaluate(self, **options: Any) -> dict[str, Any]:
        """Evaluation metrics; ``headline`` (a float) is shown on the progress bar."""
        return {}

    def watch(self) -> str | None:
        """Raise ``Diverged`` when training has gone non-finite (called at log points and before
        each checkpoint); may return a warning line (e.g. skipped updates) to print."""
        return None

    def skipped_updates(self) -> tuple[int, int]:
        """``(skipped, made)``: updates skipped as non-finite and updates made so far (read at the end
        of a run: all skipped is divergence). Kinds that never skip an update return ``(0, 0)``."""
        return 0, 0

    def divergence_advice(self) -> str:
        """What to try when the run diverges (kinds name the config keys of their learning rates)."""
        return "try a lower learning rate"

    def final_metrics(self) -> dict[str, Any]:
        """What ``final_metrics.json`` holds at the end of the run."""
        return {}

    @property
    def task_names(self) -> list[str] | None:
        """The tasks/objectives, for TensorBoard's comparison charts (None: any name)."""
        return None

    def layout_tags(self) -> dict[str, Any]:
        """Tags of TensorBoard's comparison charts when they differ from RL's
        (``runners/tb_layout.py::layout``: success_tag, weight_tag, conflict_tags, speed_tags)."""
        return {}

    def progress_fields(self, record: dict[str, Any]) -> dict[str, Any]:
        """Fields of a log record to show on the progress bar (e.g. throughput)."""
        return {}

    @property
    def eta_reliable(self) -> bool:
        """False while the rate is not representative (e.g. an RL warm-up of random actions)."""
        return True

    def summary(self, metrics: dict[str, Any]) -> str:
        """One line about an evaluation, printed above the progress bar."""
        headline = metrics.get("headline")
        return "" if headline is None else f"eval {headline:.4g}"

    # ----- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bitwise, with ``format`` and ``config`` (the resolved
        config as a dict, compared on resume); the shell adds ``kind`` and ``position``."""
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any], *, for_evaluation: bool = False) -> None:
        """Restore ``state_dict()`` (``for_evaluation``: a snapshot is enough, e.g. networks only)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release environments, workers, files."""
