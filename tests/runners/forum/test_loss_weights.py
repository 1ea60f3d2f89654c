"""FORUM's multi-task loss-weight problem (``morl forum``, ``problem: mtl``): accuracies in percent,
the headline's fallback to MSE, the step size indexed by epoch when asked, and one-line data errors."""

from __future__ import annotations

import math

import pytest
import torch

from morl.runners.config import load_config
from morl.runners.errors import UserError
from morl.runners.forum.config import ForumRunConfig
from morl.runners.forum.loss_weights import LossWeightProblem, _headline, _percent


def _problem(*overrides):
    cfg = load_config(ForumRunConfig, None, ["problem=mtl", "mtl.hidden=[8]", "forum.inner_steps=1", *overrides])
    return LossWeightProblem(cfg, torch.device("cpu"))


def test_accuracies_go_to_percent_and_nothing_else_does():
    assert _percent({"a/accuracy": 0.25, "a/loss": 0.5, "b/mse": 0.125}) == {
        "a/accuracy": 25.0,
        "a/loss": 0.5,
        "b/mse": 0.125,
    }


def test_the_headline_is_the_mean_accuracy_else_the_mean_mse():
    assert _headline({"a/accuracy": 50.0, "b/accuracy": 70.0, "c/mse": 3.0, "a/loss": 9.0}) == 60.0
    assert _headline({"y0/mse": 1.0, "y1/mse": 3.0, "y0/loss": 9.0}) == 2.0
    assert math.isnan(_headline({"a/loss": 1.0}))


def _record_steps(problem, monkeypatch):
    calls = []

    def step(lower, upper, beta=None):
        calls.append((beta, problem.learner.forum.warm_start))
        return {}

    monkeypatch.setattr(problem.learner, "step", step)
    return calls


def test_beta_per_epoch_indexes_the_step_size_by_epoch(monkeypatch):
    problem = _problem("forum.beta_per_epoch=true", "forum.beta_power=0.5")
    problem.iters_per_epoch = 4
    calls = _record_steps(problem, monkeypatch)
    for k in (1, 4, 5, 9):
        problem.step(k)
    # iterations 1-4 are epoch 1, 5-8 epoch 2, 9 epoch 3: beta = epoch^-0.5
    assert [beta for beta, _ in calls] == pytest.approx([1.0, 1.0, 2**-0.5, 3**-0.5])


def test_without_beta_per_epoch_forum_picks_beta_itself_and_the_warm_start_follows_the_config(monkeypatch):
    problem = _problem("forum.warm_start=false")
    calls = _record_steps(problem, monkeypatch)
    problem.step(7)
    assert calls == [(None, False)]


def test_the_upper_batch_comes_from_the_configured_split(monkeypatch):
    for split in ("val", "train"):
        problem = _problem(f"mtl.upper_split={split}")
        drawn = []
        monkeypatch.setattr(problem, "_batch", lambda name, drawn=drawn: drawn.append(name) or name)
        _record_steps(problem, monkeypatch)
        problem.step(1)
        assert drawn == ["train", split]


def test_an_epoch_is_at_least_one_iteration():
    assert _problem("mtl.batch_size=100000").iters_per_epoch == 1


def test_diagnostics_name_each_tasks_loss_weight():
    problem = _problem()
    assert problem.names == ["digit", "parity", "large"]  # the digits data's default tasks
    weights = {"weights": torch.tensor([0.5, 0.25, 0.25])}
    assert problem.diagnostics(weights) == {"forum/loss_weight": {"digit": 0.5, "parity": 0.25, "large": 0.25}}


def test_bad_data_is_one_line_naming_the_section():
    with pytest.raises(UserError, match="^mtl.data: ") as err:
        _problem("mtl.data.options={tasks: [colour]}")
    assert "\n" not in str(err.value)
