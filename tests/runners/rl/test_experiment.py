"""Multi-task RL as an experiment of the shell (runners/rl/experiment.py): the evaluation's per-task
results and the best mean success so far, the final metrics, the summary line, and the log record
of an interval (with its reset), checked against values worked out by hand."""

import math

import numpy as np
import pytest

import morl.runners.rl.iteration as iteration
from morl.runners.rl.config import load_rl_config
from morl.runners.rl.experiment import RLExperiment
from morl.runners.rl.metrics import SectionTimer
from tests.runners.rl.runs import QUICK, TINY

NAMES = ["goal-0", "goal-1", "goal-2", "goal-3"]


@pytest.fixture
def scripted_evaluations(monkeypatch):
    """Replaces the evaluation episodes by these results, in turn; records the episodes asked for."""
    results, asked = [], []

    def evaluate_agent(agent, eval_env, device, episodes_per_task):
        asked.append(episodes_per_task)
        success, ret = results.pop(0)
        return {"task_names": NAMES, "success": np.array(success), "return": np.array(ret)}

    monkeypatch.setattr(iteration, "evaluate_agent", evaluate_agent)
    return results, asked


def _exp(**kwargs) -> RLExperiment:
    return RLExperiment(load_rl_config(QUICK, [*TINY, "run.total_steps=20"]), **kwargs)


def test_an_evaluation_reports_each_task_and_the_best_mean_success_so_far(scripted_evaluations):
    results, asked = scripted_evaluations
    results += [
        ([0.5, 1.0, 0.0, 0.5], [1.0, 2.0, 3.0, 4.0]),  # mean success 0.5
        ([0.0, 0.0, 0.0, 0.5], [0.0, 0.0, 0.0, 2.0]),  # 0.125: the best stays 0.5
        ([1.0, 1.0, 1.0, 0.0], [4.0, 4.0, 4.0, 0.0]),  # 0.75: the new best
    ]
    exp = _exp()
    first = exp.evaluate()
    assert first == {
        "eval/success": {"goal-0": 0.5, "goal-1": 1.0, "goal-2": 0.0, "goal-3": 0.5, "mean": 0.5},
        "eval/return": {"goal-0": 1.0, "goal-1": 2.0, "goal-2": 3.0, "goal-3": 4.0, "mean": 2.5},
        "headline": 0.5,
        "eval/success/best_mean": 0.5,
    }
    assert exp.evaluate()["eval/success/best_mean"] == 0.5
    third = exp.evaluate(episodes=3)
    assert third["eval/success/best_mean"] == 0.75 and third["headline"] == 0.75
    assert asked == [1, 1, 3]  # run.eval_episodes unless given
    final = exp.final_metrics()
    assert final == {
        "step": 0,
        "updates": 0,
        "best_mean_success": 0.75,
        "train_seconds": {"cpu": 0.0, "wall": 0.0},
        "eval/success": third["eval/success"],
        "eval/return": {"goal-0": 4.0, "goal-1": 4.0, "goal-2": 4.0, "goal-3": 0.0, "mean": 3.0},
        "headline": 0.75,
    }
    assert exp.summary(third) == "eval success 0.750 (best 0.750), return 3.0"
    exp.close()


def test_without_an_evaluation_the_final_metrics_have_no_headline():
    exp = _exp()
    final = exp.final_metrics()
    assert set(final) == {"step", "updates", "best_mean_success", "train_seconds"}
    assert math.isnan(final["best_mean_success"])
    assert exp.summary({"loss/actor": {"mean": 1.0}}) == ""
    exp.close()


def test_morl_eval_reports_the_episodes_and_leaves_the_runs_best_alone(scripted_evaluations):
    results, asked = scripted_evaluations
    results.append(([1.0, 1.0, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0]))
    exp = _exp(for_evaluation=True)
    out = exp.evaluate(episodes=2)
    assert out["episodes_per_task"] == 2 and out["headline"] == 0.5 and "eval/success/best_mean" not in out
    assert math.isnan(exp.s.stats.best_eval_success) and exp.s.stats.last_eval is None
    assert exp.summary(out) == "eval success 0.500, return 2.0"
    exp.close()


def test_a_log_record_covers_the_interval_since_the_last_one(monkeypatch):
    exp = _exp()
    now = [0.0]
    exp.timer = SectionTimer(clock=lambda: now[0])  # the steps take no time; the interval lasts 2 s
    for _ in range(6):  # warm-up 4: updates after steps 5 and 6
        exp.step()
    now[0] = 2.0
    record = exp.log_metrics()
    assert record["perf/transitions_per_s"] == 12.0  # 6 steps x 4 tasks in 2 s
    assert record["perf/updates_per_s"] == 1.0
    assert set(record["loss/actor"]) == {*NAMES, "mean"}
    now[0] = 3.0
    again = exp.log_metrics()  # nothing happened since: the interval was reset
    assert again["perf/transitions_per_s"] == 0.0 and "loss/actor" not in again
    exp.close()
