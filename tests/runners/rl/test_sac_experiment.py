"""What the shell sees of both SAC kinds (runners/rl/sac_experiment.py): the schedule from the
``run:`` section, the training seconds summed over the steps alone (and over a resume), and the
divergence rules: skipped updates reported once, a streak that reaches ``run.max_nonfinite_updates``
or NaN actions stop the run naming the last good snapshot, worked out by hand from the schedule."""

import functools
import itertools
from types import SimpleNamespace

import pytest
import torch

import morl.runners.rl.sac_experiment as sac_experiment
from morl.runners.checkpoint import atomic_torch_save, torch_load
from morl.runners.divergence import Diverged, NonFiniteOutput
from morl.runners.rl.config import load_rl_config
from morl.runners.rl.experiment import RLExperiment
from morl.runners.rl.metrics import LoopStats
from morl.runners.rl.sac_experiment import SACExperiment
from morl.runners.shell.experiment import Schedule
from tests.runners.rl.runs import QUICK, TINY


def _fake_time(monkeypatch) -> None:
    """Each read of either clock is one second later than the previous read of that clock."""
    clocks = {name: functools.partial(next, itertools.count()) for name in ("process_time", "perf_counter")}
    monkeypatch.setattr(sac_experiment, "time", SimpleNamespace(**clocks))


def test_train_seconds_sum_the_steps_only_and_continue_after_a_resume(tmp_path, monkeypatch):
    cfg = load_rl_config(QUICK, [*TINY, "run.total_steps=20"])
    _fake_time(monkeypatch)
    exp = RLExperiment(cfg)
    for _ in range(5):  # warm-up 4, so step 5 updates too
        exp.step()
    exp.evaluate()  # not a training step: not counted
    assert exp.s.stats.train_seconds == {"cpu": 5, "wall": 5}  # two reads of each clock per step: 1 s each
    atomic_torch_save(exp.state_dict(), tmp_path / "last.pt")
    exp.close()
    resumed = RLExperiment(cfg)
    resumed.load_state_dict(torch_load(tmp_path / "last.pt"))
    for _ in range(3):
        resumed.step()
    assert resumed.final_metrics()["train_seconds"] == {"cpu": 8, "wall": 8}
    resumed.close()


class FakeSAC(SACExperiment):
    """A SAC kind whose session is counters only: ``iterate`` advances the step or, at ``nan_at``,
    raises what the policy's NaN actions raise."""

    kind = "fake"
    default_name = "fake"
    building = "a fake agent"
    nan_at = None

    def build_session(self, cfg, for_evaluation):
        zero = torch.tensor(0)
        agent = SimpleNamespace(nonfinite_updates=zero, nonfinite_streak=zero, nonfinite_longest=zero)
        return SimpleNamespace(step=0, updates=0, device=torch.device("cpu"), agent=agent, stats=LoopStats(1))

    def iterate(self):
        if self.s.step + 1 == self.nan_at:
            raise NonFiniteOutput("the policy's actions are NaN/inf")
        self.s.step += 1


def _fake(tmp_path=None, grad_clip=None, **run):
    run = {"total_steps": 200, "warmup_steps": 20, "updates_per_step": 1, "max_nonfinite_updates": 30, **run}
    run = {"log_every": 10, "eval_every": 50, "checkpoint_every": 25, "checkpoint_minutes": 15.0, **run}
    cfg = SimpleNamespace(
        env=SimpleNamespace(name="fake"),
        agent=SimpleNamespace(grad_clip=grad_clip),
        run=SimpleNamespace(keep_checkpoints=3, name=None, out_dir="runs", **run),
    )
    exp = FakeSAC(cfg)
    exp.run_dir = tmp_path
    return exp


def _snapshots(tmp_path, *steps):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for step in steps:
        (folder / f"step_{step:09d}.pt").write_bytes(b"")
    return folder


def _counters(exp, step, updates, skipped, streak, longest):
    exp.s.step, exp.s.updates = step, updates
    agent = exp.s.agent
    agent.nonfinite_updates, agent.nonfinite_streak, agent.nonfinite_longest = map(
        torch.tensor, (skipped, streak, longest)
    )


def test_the_schedule_name_and_eta_come_from_the_run_section():
    exp = _fake()
    assert exp.schedule == Schedule(200, 10, 50, 25, 15.0, 3)
    assert exp.name == "fake" and exp.out_dir == "runs" and exp.position == 0
    exp.s.step = 20  # the last warm-up step: random actions run far faster than learning
    assert not exp.eta_reliable
    exp.s.step = 21
    assert exp.eta_reliable


def test_skipped_updates_are_reported_once_each(tmp_path):
    exp = _fake(tmp_path)
    _counters(exp, step=40, updates=20, skipped=0, streak=0, longest=0)
    assert exp.watch() is None
    _counters(exp, step=60, updates=40, skipped=3, streak=1, longest=2)
    assert exp.watch() == (
        "step 60: warning: 3 of the last 20 updates were non-finite (NaN/inf) and skipped (3 in all); "
        "if this repeats, lower the learning rate"
    )
    assert exp.watch() is None  # nothing new since
    _counters(exp, step=70, updates=50, skipped=4, streak=0, longest=2)
    assert exp.watch().startswith("step 70: warning: 1 of the last 10 updates")
    assert exp.skipped_updates() == (4, 50)


def test_a_streak_at_the_limit_stops_naming_the_snapshot_before_its_last_taken_update(tmp_path):
    # 50 updates, the last 30 skipped: the last one taken is update 19 (0-based), made at step 40
    # (warm-up 20, one update per step from step 21 on), so step 40's snapshot may hold its damage
    exp = _fake(tmp_path, grad_clip=1.0)
    folder = _snapshots(tmp_path, 20, 40, 60)
    _counters(exp, step=70, updates=50, skipped=33, streak=30, longest=30)
    with pytest.raises(Diverged) as stop:
        exp.watch()
    assert stop.value.code == 3
    assert stop.value.message == (
        "training diverged at step 70/200: 30 updates in a row were non-finite (NaN/inf) and skipped "
        "(run.max_nonfinite_updates=30; 33 of 50 updates skipped in all); "
        f"last good checkpoint {folder / 'step_000000020.pt'} (step 20); "
        "try a lower learning rate (agent.actor_lr, agent.critic_lr, agent.alpha_lr)"
    )


def test_a_long_streak_that_is_over_names_the_newest_snapshot(tmp_path):
    exp = _fake(tmp_path)
    folder = _snapshots(tmp_path, 20, 40, 60)
    _counters(exp, step=70, updates=50, skipped=33, streak=2, longest=30)
    with pytest.raises(Diverged) as stop:
        exp.watch()
    assert f"last good checkpoint {folder / 'step_000000060.pt'} (step 60)" in stop.value.message
    assert stop.value.message.endswith("or set agent.grad_clip")  # no clipping configured: suggested


def test_nan_actions_stop_at_the_next_step_before_it_counts(tmp_path):
    exp = _fake(tmp_path)
    exp.nan_at = 21
    folder = _snapshots(tmp_path, 10, 20)
    for _ in range(20):
        exp.step()
    seconds = dict(exp.s.stats.train_seconds)
    with pytest.raises(Diverged) as stop:
        exp.step()
    # the policy that made step 21's actions came out of step 20's updates: step 20's snapshot holds it
    assert stop.value.message.startswith(
        f"training diverged at step 21/200: the policy's actions are NaN/inf; "
        f"last good checkpoint {folder / 'step_000000010.pt'} (step 10); "
    )
    assert exp.s.step == 20 and exp.s.stats.train_seconds == seconds


def test_loading_for_evaluation_restores_the_agent_and_the_step_only():
    exp = _fake()
    loaded = []
    exp.s.agent.load_state_dict = loaded.append
    exp.restore = lambda state: pytest.fail("a full restore for an evaluation")
    exp.load_state_dict({"agent": {"actor": 1}, "step": 42, "device_type": "cpu"}, for_evaluation=True)
    assert loaded == [{"actor": 1}] and exp.position == 42
