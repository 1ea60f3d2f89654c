"""THE loop (runners/shell/loop.py): when it logs, evaluates and checkpoints (by count, by
wall-clock time, at the end, on request), how a run ends (finished, interrupted, diverged) and what
it writes at the end.

The divergence rules are checked on a walk x_t = t whose "model" (x) or evaluation turns NaN at a
chosen step; the schedule on a counter that records where each call came.
"""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from morl.runners.checkpoint import torch_load
from morl.runners.divergence import Diverged
from morl.runners.interrupts import Interrupted
from morl.runners.run_dir import named_run_dir
from morl.runners.shell import commands
from morl.runners.shell import loop as shell_loop
from morl.runners.shell.experiment import Experiment, Schedule
from morl.runners.shell.loop import run
from morl.runners.shell.run_info import read_run_info
from tests.runners.shell_resume_checks import error_line, status


def _last(run_dir: Path) -> dict:
    return torch_load(run_dir / "checkpoints" / "last.pt")


def test_checkpoints_come_by_count_by_wall_clock_and_at_the_end(quadratic, tmp_path, monkeypatch):
    import morl.runners.shell.checkpoints as ckpt
    import morl.runners.shell.loop as loop

    saved, real_save = [], ckpt.save_checkpoint
    monkeypatch.setattr(ckpt, "save_checkpoint", lambda exp, d: saved.append(exp.position) or real_save(exp, d))
    commands.start(
        "quadratic", quadratic(tmp_path, steps=12, checkpoint_every=5), run_dir=tmp_path / "a", progress=False
    )
    assert saved == [5, 10, 12]
    now = [0.0]
    monkeypatch.setattr(loop.time, "monotonic", lambda: now[0])
    real_step = sys.modules["new_kind"].QuadraticExperiment.step

    def slow_step(self):  # each step takes 25 s of wall-clock time
        now[0] += 25.0
        real_step(self)

    monkeypatch.setattr(sys.modules["new_kind"].QuadraticExperiment, "step", slow_step)
    saved.clear()
    commands.start(
        "quadratic",
        quadratic(tmp_path, steps=12, checkpoint_every=100, checkpoint_minutes=1),
        run_dir=tmp_path / "b",
        progress=False,
    )
    assert saved == [3, 6, 9, 12]  # 75 s >= 1 min after the previous one, and the end


def test_a_diverged_run_is_marked_and_keeps_its_last_good_checkpoint(quadratic, tmp_path):
    cfg = quadratic(tmp_path, steps=400, lr=5.0, checkpoint_every=1, log_every=1000, eval_every=1000)
    with pytest.raises(Diverged):
        commands.start("quadratic", cfg, run_dir=tmp_path / "d", progress=False)
    assert read_run_info(tmp_path / "d")["status"] == "diverged"
    assert bool(_last(tmp_path / "d")["x"].isfinite().all())


def test_a_stop_during_the_last_unit_just_finishes_the_run(quadratic, tmp_path):
    run_dir = commands.start(
        "quadratic", quadratic(tmp_path, steps=12), run_dir=tmp_path / "r", progress=False, stop_at=12
    )
    assert read_run_info(run_dir)["status"] == "finished" and (run_dir / "final_metrics.json").is_file()


def test_a_signal_while_the_final_metrics_are_computed_stops_at_once_and_resume_redoes_them(
    quadratic, tmp_path, monkeypatch
):
    import os
    import signal

    full = commands.start("quadratic", quadratic(tmp_path, steps=12), run_dir=tmp_path / "full", progress=False)
    cls = sys.modules["new_kind"].QuadraticExperiment
    real_final = cls.final_metrics

    def long_final(self):  # e.g. FORUM's baselines: minutes of work after the last step
        os.kill(os.getpid(), signal.SIGTERM)
        return real_final(self)

    monkeypatch.setattr(cls, "final_metrics", long_final)
    before = signal.getsignal(signal.SIGTERM)  # whatever was installed (pytest's, Ray's after a Ray test)
    with pytest.raises(Interrupted, match="SIGTERM: stopped while computing the final metrics.*morl resume"):
        commands.start("quadratic", quadratic(tmp_path, steps=12), run_dir=tmp_path / "cut", progress=False)
    cut = tmp_path / "cut"
    assert read_run_info(cut)["status"] == "interrupted" and not (cut / "final_metrics.json").exists()
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored
    monkeypatch.setattr(cls, "final_metrics", real_final)
    commands.resume(cut, progress=False)
    assert json.loads((cut / "final_metrics.json").read_text()) == json.loads((full / "final_metrics.json").read_text())
    assert read_run_info(cut)["status"] == "finished"


# -- the divergence rules, on a walk (moved from tests/runners/test_divergence.py) ----------------


class Walk(Experiment):
    """x goes 1, 2, 3, ...; from ``nan_at`` on x is NaN, from ``eval_nan_at`` on its evaluation is."""

    kind = command = "walk"

    def __init__(self, total=6, nan_at=None, eval_nan_at=None, skipped=0):
        self.total, self.nan_at, self.eval_nan_at, self.skipped = total, nan_at, eval_nan_at, skipped
        self.x = torch.zeros(1)

    name = out_dir = "walk"
    schedule = property(lambda self: Schedule(self.total, 1, 1, 1))

    def step(self):
        self.position += 1
        self.x = torch.tensor([float("nan") if self.position == self.nan_at else float(self.position)])

    def evaluate(self, **options):
        bad = self.eval_nan_at is not None and self.position >= self.eval_nan_at
        return {"headline": float("nan") if bad else 1.0}

    def config_dict(self):
        return {}

    def skipped_updates(self):
        return min(self.skipped, self.position), self.position

    def state_dict(self):
        return {"format": 1, "config": {}, "x": self.x.clone()}


def _run(tmp_path, exp):
    run_dir = named_run_dir(tmp_path / "run")
    with pytest.raises(SystemExit) as stop:
        run(exp, run_dir, progress=False)
    return run_dir, stop.value.code


def test_a_nan_model_is_never_saved_and_the_run_ends_diverged(tmp_path, capsys):
    run_dir, code = _run(tmp_path, Walk(nan_at=4))
    last = run_dir / "checkpoints" / "last.pt"
    assert code == 3 and status(run_dir) == "diverged"
    assert error_line(capsys) == (
        f"morl: error: training diverged at step 4/6: the model holds non-finite (NaN/inf) values (x); "
        f"last good checkpoint {last} (step 3); try a lower learning rate"
    )
    assert torch_load(last)["x"].item() == 3.0 and not (run_dir / "final_metrics.json").exists()


def test_a_non_finite_evaluation_ends_diverged_before_its_checkpoint(tmp_path, capsys):
    run_dir, code = _run(tmp_path, Walk(eval_nan_at=5))
    assert code == 3 and status(run_dir) == "diverged"
    line = error_line(capsys)
    assert line.startswith("morl: error: training diverged at step 5/6: the evaluation is non-finite (headline nan)")
    assert "(step 4)" in line and torch_load(run_dir / "checkpoints" / "last.pt")["x"].item() == 4.0


def test_a_nan_before_the_first_checkpoint_says_none_was_written(tmp_path, capsys):
    run_dir, code = _run(tmp_path, Walk(nan_at=1))
    assert code == 3 and "no checkpoint was written before it" in error_line(capsys)
    assert not (run_dir / "checkpoints" / "last.pt").exists()


def test_a_run_whose_every_update_was_skipped_ends_diverged(tmp_path, capsys):
    run_dir, code = _run(tmp_path, Walk(skipped=6))
    assert code == 3 and status(run_dir) == "diverged"
    assert "at step 6/6: every one of the 6 updates was non-finite (NaN/inf) and skipped" in error_line(capsys)
    assert torch_load(run_dir / "checkpoints" / "last.pt")["position"] == 5


def test_some_skipped_updates_still_finish(tmp_path):
    run_dir = named_run_dir(tmp_path / "run")
    run(Walk(skipped=5), run_dir, progress=False)
    assert status(run_dir) == "finished" and torch_load(run_dir / "checkpoints" / "last.pt")["position"] == 6


# -- the schedule and the end of a run ------------------------------------------------------------


def test_the_checkpoint_clock_is_due_once_its_minutes_passed_and_never_without_minutes(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(shell_loop.time, "monotonic", lambda: now[0])
    clock = shell_loop.CheckpointClock(0.5)  # 30 s
    never = shell_loop.CheckpointClock(None)
    now[0] = 129.9
    assert not clock.due()
    now[0] = 130.0  # exactly 30 s after the start
    assert clock.due()
    clock.reset()
    now[0] = 159.9
    assert not clock.due()
    now[0] = 160.0
    assert clock.due()
    now[0] = 1e9
    assert not never.due()


class Counter(Experiment):
    """Counts 1, 2, ...; records at which positions the loop asked for what."""

    kind = command = "counter"
    name = out_dir = "counter"

    def __init__(self, total, log_every, eval_every, checkpoint_every):
        self.sched = Schedule(total, log_every, eval_every, checkpoint_every)
        self.calls = {"log": [], "eval": [], "watch": []}

    schedule = property(lambda self: self.sched)

    def step(self):
        self.position += 1

    def log_metrics(self):
        self.calls["log"].append(self.position)
        return {"train/value": float(self.position)}

    def evaluate(self, **options):
        self.calls["eval"].append(self.position)
        return {"headline": 10.0 * self.position}

    def watch(self):
        self.calls["watch"].append(self.position)

    def final_metrics(self):
        return {"best": float("nan"), "last": float(self.position), "per_task": {"a": float("inf"), "b": 2.0}}

    def config_dict(self):
        return {}

    def state_dict(self):
        return {"format": 1, "config": {}}


def test_log_eval_and_checkpoint_points_are_the_multiples_of_their_interval_and_the_end(tmp_path, monkeypatch):
    import morl.runners.shell.checkpoints as ckpt

    saved, real_save = [], ckpt.save_checkpoint
    monkeypatch.setattr(ckpt, "save_checkpoint", lambda exp, d: saved.append(exp.position) or real_save(exp, d))
    exp = Counter(total=7, log_every=3, eval_every=5, checkpoint_every=4)
    run_dir = named_run_dir(tmp_path / "run")
    final = run(exp, run_dir, progress=False)
    # by hand: multiples of 3, 5 and 4 up to 7, and 7 itself (the end) for each
    assert exp.calls["log"] == [3, 6, 7] and exp.calls["eval"] == [5, 7] and saved == [4, 7]
    # watch() at every log point and again before every checkpoint
    assert exp.calls["watch"] == [3, 4, 6, 7, 7]
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [
        ("train", 3),
        ("eval", 5),
        ("train", 6),
        ("train", 7),
        ("eval", 7),
    ]
    assert [r["headline"] for r in records if r["kind"] == "eval"] == [50.0, 70.0]
    # non-finite final metrics are null in final_metrics.json (JSON has no NaN), at any depth
    expected = {"best": None, "last": 7.0, "per_task": {"a": None, "b": 2.0}}
    assert final == expected and json.loads((run_dir / "final_metrics.json").read_text()) == expected
    info = read_run_info(run_dir)
    assert (info["status"], info["position"], info["total"], info["kind"]) == ("finished", 7, 7, "counter")
    assert torch_load(run_dir / "checkpoints" / "last.pt")["position"] == 7


def test_a_run_stopped_before_its_end_is_interrupted_with_its_checkpoint_at_the_stop(tmp_path):
    exp = Counter(total=10, log_every=100, eval_every=100, checkpoint_every=100)
    run_dir = named_run_dir(tmp_path / "run")
    with pytest.raises(Interrupted, match=f"at step 4/10; checkpoint {run_dir / 'checkpoints' / 'last.pt'}"):
        run(exp, run_dir, progress=False, stop_at=4)
    assert exp.position == 4 and read_run_info(run_dir)["status"] == "interrupted"
    assert torch_load(run_dir / "checkpoints" / "last.pt")["position"] == 4  # no periodic checkpoint was due
    assert not (run_dir / "final_metrics.json").exists()


def test_json_safe_turns_non_finite_floats_into_none_and_tuples_into_lists():
    value = {"a": math.nan, "b": [1.0, math.inf, (2, -math.inf)], "c": {"d": math.nan}, "s": "x", "n": 3, "z": None}
    assert shell_loop._json_safe(value) == {
        "a": None,
        "b": [1.0, None, [2, None]],
        "c": {"d": None},
        "s": "x",
        "n": 3,
        "z": None,
    }
