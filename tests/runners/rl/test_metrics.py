"""What the RL loop measures between two log points (runners/rl/metrics.py), against values worked
out by hand: per-task episode means, interval means of the update metrics (running counters: their
latest value), the state a checkpoint keeps, and the timers on fake clocks."""

import functools
import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import morl
from morl.runners.rl import metrics
from morl.runners.rl.metrics import AggregationTimer, LoopStats, SectionTimer, interval_metrics, per_task


def _episodes(stats: LoopStats, tasks, success, ret, done) -> None:
    info = {"episode_success": np.array(success, float), "episode_return": np.array(ret, float)}
    stats.add_episodes(np.array(tasks), info, np.array(done))


def test_episode_means_are_per_task_and_a_task_without_episodes_keeps_its_last_value():
    stats = LoopStats(3)
    _episodes(stats, [0, 0, 1, 2], [1, 0, 1, 1], [10, 20, 30, 99], [True, True, True, False])
    _episodes(stats, [0, 0, 1, 2], [1, 1, 0, 1], [40, 50, 60, 99], [True, False, False, False])
    success, ret = stats.episode_means()
    # task 0: episodes (1, 10), (0, 20), (1, 40); task 1: (1, 30); task 2: none ended yet
    np.testing.assert_allclose(success, [2 / 3, 1.0, np.nan])
    np.testing.assert_allclose(ret, [70 / 3, 30.0, np.nan])
    stats.reset_interval()
    _episodes(stats, [0, 0, 1, 2], [0, 0, 0, 1], [5, 5, 5, 7], [False, False, False, True])
    success, ret = stats.episode_means()
    np.testing.assert_allclose(success, [2 / 3, 1.0, 1.0])  # tasks 0 and 1 ended no episode: kept
    np.testing.assert_allclose(ret, [70 / 3, 30.0, 7.0])


def test_update_means_average_each_key_over_its_own_updates_and_counters_report_their_latest():
    stats = LoopStats(2)
    stats.add_update({"critic_loss": torch.tensor([1.0, 2.0]), "nonfinite_updates": torch.tensor(1.0)})
    stats.add_update({"critic_loss": torch.tensor([3.0, 6.0]), "nonfinite_updates": torch.tensor(2.0)})
    stats.add_update(
        {
            "critic_loss": torch.tensor([5.0, 7.0]),
            "nonfinite_updates": torch.tensor(2.0),
            "grad_cos_min": torch.tensor(-0.5),  # only on the interval's diagnostic update
        }
    )
    means = stats.update_means()
    np.testing.assert_allclose(means["critic_loss"], [3.0, 5.0])  # (1+3+5)/3, (2+6+7)/3
    np.testing.assert_allclose(means["nonfinite_updates"], [2.0])  # the latest, not 5/3
    np.testing.assert_allclose(means["grad_cos_min"], [-0.5])  # one value over its one update, not over 3
    assert stats.update_count == 3
    stats.reset_interval()
    assert stats.update_means() == {} and stats.transitions == 0


def test_the_state_dict_round_trip_keeps_the_interval_and_the_run_totals():
    stats = LoopStats(2)
    _episodes(stats, [0, 1], [1, 0], [3.0, 4.0], [True, True])
    stats.add_update({"actor_loss": torch.tensor([1.0, 3.0])})
    stats.transitions, stats.best_eval_success, stats.skipped_reported = 8, 0.5, 2
    stats.train_seconds["cpu"] += 1.5
    stats.train_seconds["wall"] += 2.5
    stats.last_eval = {"step": 4, "success": {"a": 1.0}}
    back = LoopStats()
    back.load_state_dict(stats.state_dict())
    assert back.num_tasks == 2 and back.transitions == 8 and back.skipped_reported == 2
    assert back.best_eval_success == 0.5 and back.last_eval == {"step": 4, "success": {"a": 1.0}}
    assert back.train_seconds == {"cpu": 1.5, "wall": 2.5}
    stats.train_seconds["cpu"] += 1.0  # the state is a copy: the saved seconds stay
    assert back.train_seconds == {"cpu": 1.5, "wall": 2.5}
    back.add_update({"actor_loss": torch.tensor([3.0, 5.0])})
    np.testing.assert_allclose(back.update_means()["actor_loss"], [2.0, 4.0])  # continues the interval
    success, _ = back.episode_means()
    np.testing.assert_allclose(success, [1.0, 0.0])


def test_a_state_without_per_key_counts_counted_every_key_on_every_update():
    stats = LoopStats(1)
    stats.add_update({"alpha": torch.tensor([2.0])})
    stats.add_update({"alpha": torch.tensor([4.0])})
    state = stats.state_dict()
    del state["update_counts"]  # a checkpoint of an older morl
    back = LoopStats()
    back.load_state_dict(state)
    assert back.update_counts == {"alpha": 2}
    np.testing.assert_allclose(back.update_means()["alpha"], [3.0])


def _ticks(step: float):
    """A clock that advances by ``step`` on every read."""
    return functools.partial(next, itertools.count(0.0, step))


def test_the_section_timer_sums_each_sections_seconds_since_its_reset():
    now = [0.0]
    timer = SectionTimer(clock=lambda: now[0])
    now[0] = 1.0
    with timer("env"):
        now[0] = 3.0
    with timer("update"):
        now[0] = 7.0
    with timer("env"):
        now[0] = 8.0
    assert timer.seconds == {"env": 3.0, "update": 4.0} and timer.elapsed() == 8.0
    with pytest.raises(RuntimeError), timer("update"):
        now[0] = 10.0
        raise RuntimeError  # the section's time counts even when it fails
    assert timer.seconds["update"] == 6.0
    timer.reset()
    assert timer.seconds == {} and timer.elapsed() == 0.0


def test_the_aggregation_timer_times_each_call_of_the_aggregator_on_the_cpu():
    aggregator = morl.build("mean")
    timer = AggregationTimer(aggregator, torch.device("cpu"), clock=_ticks(0.5))
    assert timer.calls == 0 and math.isnan(timer.per_call())
    grads = torch.ones(2, 3)
    aggregator(grads)
    aggregator(grads)
    assert timer.calls == 2 and timer.seconds == 1.0 and timer.per_call() == 0.5  # each call: 2 reads 0.5 apart
    timer.reset()
    assert (timer.calls, timer.seconds) == (0, 0.0)
    timer.close()
    aggregator(grads)  # the hooks are gone
    assert timer.calls == 0


def test_interval_metrics_logs_per_task_metrics_by_task_and_mean_and_speed_by_elapsed_time(monkeypatch):
    monkeypatch.setattr(metrics, "time", SimpleNamespace(perf_counter=lambda: 0.0))  # the read-back takes 0 s
    stats = LoopStats(2)
    _episodes(stats, [0, 1], [1.0, 0.0], [10.0, 20.0], [True, False])
    stats.add_update({"actor_loss": torch.tensor([1.0, 3.0]), "grad_norm_pre": torch.tensor(2.0)})
    stats.add_update({"actor_loss": torch.tensor([3.0, 5.0]), "grad_norm_pre": torch.tensor(4.0)})
    stats.transitions = 40
    now = [0.0]
    timer = SectionTimer(clock=lambda: now[0])
    with timer("env"):
        now[0] = 2.0
    with timer("update"):
        now[0] = 5.0
    now[0] = 10.0
    agg_timer = SimpleNamespace(calls=4, per_call=lambda: 0.25, counters=lambda: {"aggregator/not_converged": 1})
    record = interval_metrics(["a", "b"], stats, timer, agg_timer)
    assert record == {
        "train/success": {"a": 1.0, "b": 0.0, "mean": 0.5},  # task b: no episode yet, shown as 0
        "train/return": {"a": 10.0, "b": 0.0, "mean": 5.0},
        "loss/actor": {"a": 2.0, "b": 4.0, "mean": 3.0},
        "grad/norm_pre_aggregation": 3.0,
        "perf/transitions_per_s": 4.0,  # 40 transitions in 10 s
        "perf/updates_per_s": 0.2,
        "perf/env_fraction": 0.2,
        "perf/update_fraction": 0.3,
        "perf/aggregation_fraction": 0.05,  # 0.25 s per call x 2 updates of 10 s
        "perf/aggregation_ms": 250.0,
        "aggregator/not_converged": 1.0,
    }


def test_per_task_names_each_value_and_adds_the_mean():
    assert per_task(np.array([[1.0], [2.0], [6.0]]), ["a", "b", "c"]) == {"a": 1.0, "b": 2.0, "c": 6.0, "mean": 3.0}
