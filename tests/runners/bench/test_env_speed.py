"""``morl bench envs``: env-steps per second count every sub-env's transition, per wall-clock and
per CPU second, under random actions in the action box; bad sizes are one line."""

import argparse
import itertools
import types

import numpy as np
import pytest

import morl.envs
from morl.runners.bench import env_speed
from morl.runners.errors import UserError


class FakeVectorEnv:
    """3 sub-envs with 2-dimensional actions; remembers what it was given."""

    num_envs = 3
    single_action_space = types.SimpleNamespace(shape=(2,))

    def __init__(self):
        self.seeds, self.actions = [], []

    def reset(self, seed=None):
        self.seeds.append(seed)

    def step(self, action):
        self.actions.append(action)


def _clocks(monkeypatch, wall, cpu):
    """perf_counter and process_time advancing by ``wall`` and ``cpu`` seconds between their calls."""
    walls, cpus = itertools.count(0.0, wall), itertools.count(0.0, cpu)
    monkeypatch.setattr(env_speed.time, "perf_counter", lambda: next(walls))
    monkeypatch.setattr(env_speed.time, "process_time", lambda: next(cpus))


def test_steps_per_second_counts_every_sub_env_per_wall_and_cpu_second(monkeypatch):
    env = FakeVectorEnv()
    _clocks(monkeypatch, wall=2.0, cpu=0.5)
    # 4 vector steps x 3 sub-envs = 12 env-steps in 2 s of wall-clock and 0.5 s of CPU
    assert env_speed.steps_per_second(env, 4, seed=7) == (6.0, 24.0)
    assert env.seeds == [7] and len(env.actions) == 4
    stacked = np.stack(env.actions)
    assert stacked.shape == (4, 3, 2) and stacked.dtype == np.float32
    assert -1.0 <= stacked.min() < 0.0 < stacked.max() <= 1.0  # the whole box [-1, 1]
    assert len(np.unique(stacked)) == stacked.size


def test_the_same_seed_draws_the_same_actions(monkeypatch):
    _clocks(monkeypatch, wall=1.0, cpu=1.0)
    a, b, c = FakeVectorEnv(), FakeVectorEnv(), FakeVectorEnv()
    for env, seed in ((a, 0), (b, 0), (c, 1)):
        env_speed.steps_per_second(env, 3, seed=seed)
    assert np.array_equal(np.stack(a.actions), np.stack(b.actions))
    assert not np.array_equal(np.stack(a.actions), np.stack(c.actions))


def _args(**kw):
    return argparse.Namespace(
        **({"env": "point_mass", "steps": 5, "repeats": 2, "protocol": "mtrl", "reference": False} | kw)
    )


@pytest.mark.parametrize("steps, repeats", [(0, 3), (5, 0)])
def test_fewer_than_one_step_or_repeat_is_one_line(steps, repeats):
    with pytest.raises(UserError, match=f"^--steps and --repeats must be >= 1, got {steps} and {repeats}$"):
        env_speed.run(_args(steps=steps, repeats=repeats))


@pytest.mark.parametrize("env", ["point_mass", "mt1:reach-v3"])
def test_a_reference_for_an_env_meta_world_does_not_vectorise_is_one_line(env):
    with pytest.raises(UserError, match="^--reference times Meta-World's own MT10 or MT50 vector env; --env is "):
        env_speed.run(_args(env=env, reference=True))


def test_run_prints_one_line_per_repeat_for_the_named_env(monkeypatch, capsys):
    made, env = [], FakeVectorEnv()

    def make_env(name, seed, protocol):
        made.append((name, seed, protocol))
        return env

    monkeypatch.setattr(morl.envs, "make_env", make_env)
    _clocks(monkeypatch, wall=0.5, cpu=1.0)
    assert env_speed.run(_args(env="mt1:reach-v3", steps=5, repeats=2, protocol="metaworld_v3")) == 0
    assert made == [("mt1:reach-v3", 0, "metaworld_v3")]
    lines = capsys.readouterr().out.splitlines()
    # 5 steps x 3 sub-envs = 15 env-steps in 0.5 s (30 per second) and 1 s of CPU (15 per CPU-s)
    assert lines == [f"repeat {r}: ours     30 env-steps/s (    15 per CPU-s)" for r in range(2)]
    assert len(env.actions) == 10
