"""One RL run's state (runners/rl/session.py): how a session is built from a config, and that a
session restored from ``session_state`` continues exactly like the one that was saved, on the fast
point-mass env (tests/runners/rl/runs.py)."""

import random

import numpy as np
import pytest
import torch

from morl.runners.checkpoint import atomic_torch_save, torch_load
from morl.runners.errors import UserError
from morl.runners.rl.config import load_rl_config
from morl.runners.rl.iteration import iterate
from morl.runners.rl.metrics import AggregationTimer, SectionTimer
from morl.runners.rl.session import (
    NO_REPLAY,
    agent_state_for,
    build_evaluation,
    build_session,
    load_rng_state,
    load_session_state,
    rng_state,
    session_state,
)
from tests.runners.rl.runs import QUICK, TINY
from tests.state_equality import assert_state_equal


def _cfg(*overrides):
    return load_rl_config(QUICK, [*TINY, *overrides])


def _steps(s, n: int) -> None:
    timer, agg_timer = SectionTimer(), AggregationTimer(s.aggregator, s.device)
    for _ in range(n):
        iterate(s, timer, agg_timer)
    agg_timer.close()


def test_a_session_splits_batch_and_replay_evenly_over_the_tasks():
    s = build_session(_cfg())  # 4 tasks, batch 32, replay 400
    assert s.task_names == ["goal-0", "goal-1", "goal-2", "goal-3"] and s.per_task_batch == 8
    assert s.replay.num_tasks == 4 and s.replay.capacity == 100
    assert (s.step, s.updates, s.stats.num_tasks, s.obs.shape[0]) == (0, 0, 4, 4)
    e = build_evaluation(_cfg())  # what `morl eval` needs: no training env, no replay
    assert e.env is None and e.replay is None and e.eval_env.num_tasks == 4


def _saved(s, tmp_path):
    """``session_state(s)`` written and read back as a checkpoint is (the live state shares the
    parameters' storage)."""
    atomic_torch_save(session_state(s), tmp_path / "last.pt")
    return torch_load(tmp_path / "last.pt")


def test_a_restored_session_continues_exactly_like_the_saved_one(tmp_path):
    s = build_session(_cfg())
    _steps(s, 6)  # warm-up 4: updates after steps 5 and 6
    state = _saved(s, tmp_path)
    _steps(s, 3)
    restored = build_session(_cfg())
    load_session_state(restored, state)
    assert (restored.step, restored.updates) == (6, 2)
    _steps(restored, 3)
    assert (restored.step, restored.updates) == (9, 5)
    a, b = session_state(s), session_state(restored)
    stats_a, stats_b = a.pop("stats"), b.pop("stats")
    assert_state_equal(a, b)
    assert_state_equal(stats_a.pop("update_sums"), stats_b.pop("update_sums"), "stats.update_sums")
    np.testing.assert_equal(stats_a, stats_b)  # NaN (no episode, no evaluation yet) equals NaN here


def test_a_snapshot_without_replay_or_of_another_format_is_refused():
    s = build_session(_cfg())
    with pytest.raises(UserError) as exc:
        load_session_state(s, session_state(s, with_replay=False))
    assert str(exc.value) == NO_REPLAY
    with pytest.raises(UserError, match="^checkpoint format 7 is not supported; expected 1$"):
        load_session_state(s, {**session_state(s), "format": 7})


def test_a_checkpoint_of_another_device_type_keeps_this_sessions_generators(tmp_path, capsys):
    s = build_session(_cfg())
    _steps(s, 6)
    state = {**_saved(s, tmp_path), "device_type": "cuda"}  # as if written on a GPU
    restored = build_session(_cfg())
    sample_gen, agent_gen = restored.sample_gen.get_state(), restored.agent.generator.get_state()
    load_session_state(restored, state)
    assert "checkpoint written on cuda, continuing on cpu" in capsys.readouterr().out
    assert torch.equal(restored.sample_gen.get_state(), sample_gen)
    assert torch.equal(restored.agent.generator.get_state(), agent_gen)
    assert not torch.equal(sample_gen, state["rng"]["sample_gen"])  # so the check above means something
    assert restored.step == 6 and torch.equal(restored.replay.sizes(), s.replay.sizes())


def test_agent_state_for_swaps_in_the_agents_own_generator_only_across_device_types():
    class Agent:
        generator = torch.Generator().manual_seed(5)

    state = {"agent": {"actor": torch.ones(2), "generator": torch.Generator().manual_seed(9).get_state()}}
    assert agent_state_for(Agent, state, same_device=True) is state["agent"]
    other = agent_state_for(Agent, state, same_device=False)
    assert torch.equal(other["generator"], torch.Generator().manual_seed(5).get_state())
    assert other["actor"] is state["agent"]["actor"]


def _draws(s) -> list:
    return [
        random.random(),
        float(np.random.rand()),
        float(torch.rand(1)),
        float(torch.rand(1, generator=s.sample_gen)),
        float(s.action_rng.random()),
    ]


@pytest.mark.parametrize("same_device", [True, False])
def test_the_random_streams_restart_where_they_were_saved(same_device):
    s = build_session(_cfg())
    state = rng_state(s)
    first = _draws(s)
    load_rng_state(s, state, same_device)
    again = _draws(s)
    assert again[:3] == first[:3] and again[4] == first[4]
    # the sampling generator is restored on the same device type only (it continues otherwise)
    assert (again[3] == first[3]) is same_device
