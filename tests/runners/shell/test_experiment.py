"""The protocol every kind of run implements (runners/shell/experiment.py): what a kind inherits when
it overrides nothing (config loading with its own checks, names, the summary line, no skipped
updates) and the schedule's defaults."""

import dataclasses
from dataclasses import dataclass

import pytest

from morl.runners.errors import UserError
from morl.runners.shell.experiment import Experiment, Schedule


@dataclass
class TinyConfig:
    name: str = "tiny"
    out_dir: str = "runs"
    steps: int = 3


class Tiny(Experiment):
    kind = command = "tiny"
    config_class = TinyConfig
    validated: list = []

    @classmethod
    def validate(cls, cfg):
        cls.validated.append(cfg.steps)
        if cfg.steps < 1:
            raise UserError(f"steps must be >= 1, got {cfg.steps}")


def test_load_config_applies_the_overrides_then_the_kinds_own_checks(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("name: from-file\nsteps: 5\n")
    Tiny.validated.clear()
    cfg = Tiny.load_config(path, ["steps=7"])
    assert cfg == TinyConfig(name="from-file", out_dir="runs", steps=7) and Tiny.validated == [7]
    with pytest.raises(UserError, match="steps must be >= 1, got 0"):
        Tiny.load_config(path, ["steps=0"])
    exp = Tiny(cfg)
    assert (exp.name, exp.out_dir, exp.config_dict()) == ("from-file", "runs", dataclasses.asdict(cfg))


def test_the_default_summary_shows_the_headline_with_four_significant_digits():
    exp = Tiny(TinyConfig())
    assert exp.summary({"headline": 0.123456}) == "eval 0.1235"
    assert exp.summary({"headline": 12345.0}) == "eval 1.234e+04"
    assert exp.summary({"eval/loss": 1.0}) == ""  # no headline: nothing to say


def test_a_kind_that_overrides_nothing_has_no_tasks_skips_nothing_and_needs_its_own_work():
    exp = Tiny(TinyConfig())
    assert exp.position == 0 and exp.skipped_updates() == (0, 0) and exp.watch() is None
    assert exp.task_names is None and exp.eta_reliable and exp.log_metrics() == {} and exp.evaluate() == {}
    for method in (exp.step, exp.state_dict):
        with pytest.raises(NotImplementedError):
            method()
    with pytest.raises(NotImplementedError):
        exp.schedule  # noqa: B018  (a property)


def test_a_schedule_checkpoints_by_count_only_and_keeps_no_snapshots_by_default():
    sched = Schedule(100, 10, 20, 50)
    assert (sched.checkpoint_minutes, sched.keep_snapshots) == (None, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sched.total = 200
