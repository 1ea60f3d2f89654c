"""FORUM's data hyper-cleaning problem (``morl forum``, ``problem: hypercleaning``): per-dataset
metrics named after the shards, the test metrics of the best val-2 evaluation (not the last),
one-line errors for impossible data, and its state round trip."""

from __future__ import annotations

import pytest
import torch

import morl.agents.supervised.hypercleaning as hc_agent
from morl.runners.config import load_config
from morl.runners.errors import UserError
from morl.runners.forum.config import ForumRunConfig
from morl.runners.forum.hypercleaning import HyperCleaningProblem, _test_summary


def _problem(*overrides):
    cfg = load_config(ForumRunConfig, None, ["hypercleaning.hidden=[8]", "forum.inner_steps=1", *overrides])
    return HyperCleaningProblem(cfg, torch.device("cpu"))


def _scores(val2, test):
    """What ``evaluate`` returns for val-2 and test: accuracies and F1 in %, per dataset."""
    return [
        {"accuracy": torch.tensor(val2), "f1": torch.tensor(val2)},
        {"accuracy": torch.tensor(test), "f1": torch.tensor(test) - 10},
    ]


def test_the_test_summary_is_per_dataset_with_the_mean_over_datasets():
    test = {"accuracy": torch.tensor([80.0, 90.0]), "f1": torch.tensor([70.0, 60.0])}
    assert _test_summary(test, ["dataset0", "dataset1"]) == {
        "dataset0/accuracy": 80.0,
        "dataset1/accuracy": 90.0,
        "mean/accuracy": 85.0,
        "dataset0/f1": 70.0,
        "dataset1/f1": 60.0,
        "mean/f1": 65.0,
    }
    assert _test_summary(None, ["dataset0"]) == {}  # no evaluation yet


def test_the_reported_test_metrics_are_those_of_the_best_val2_evaluation(monkeypatch):
    problem = _problem()
    assert problem.names == ["dataset0", "dataset1"]
    returns = [
        *_scores([50.0, 60.0], [40.0, 50.0]),  # val-2 mean 55
        *_scores([70.0, 80.0], [60.0, 70.0]),  # val-2 mean 75: the best
        *_scores([60.0, 60.0], [90.0, 90.0]),  # val-2 mean 60: a better test score does not count
    ]
    monkeypatch.setattr(hc_agent, "evaluate", lambda model, splits: returns.pop(0))
    records = [problem.evaluate() for _ in range(3)]
    assert records[2]["test/accuracy"] == {"dataset0": 90.0, "dataset1": 90.0, "mean": 90.0}
    assert records[1]["val2/accuracy"] == {"dataset0": 70.0, "dataset1": 80.0, "mean": 75.0}
    assert [r["headline"] for r in records] == [45.0, 65.0, 90.0]  # each evaluation's own mean test accuracy
    assert problem.final_metrics() == {
        "dataset0/accuracy": 60.0,
        "dataset1/accuracy": 70.0,
        "mean/accuracy": 65.0,
        "dataset0/f1": 50.0,
        "dataset1/f1": 60.0,
        "mean/f1": 55.0,
        "best_val2_accuracy": 75.0,
    }


def test_every_sample_weight_starts_at_sigmoid_of_the_initial_logit():
    problem = _problem("hypercleaning.alpha_init=0.0")
    record = problem.evaluate()
    # sigma(0) = 0.5 for clean and corrupted samples alike
    assert float(record["weights/weight_clean"]) == float(record["weights/weight_corrupted"]) == 0.5


def test_impossible_data_is_one_line_naming_the_section():
    with pytest.raises(UserError, match=r"^hypercleaning: m \(number of datasets\) must be between 1 and 4"):
        _problem("hypercleaning.datasets=5")


def test_the_best_evaluation_survives_a_state_round_trip(monkeypatch):
    problem = _problem()
    monkeypatch.setattr(hc_agent, "evaluate", lambda model, splits: {"accuracy": torch.tensor([30.0, 50.0]),
                                                                     "f1": torch.tensor([1.0, 2.0])})  # fmt: skip
    problem.evaluate()
    state = problem.state_dict()
    fresh = _problem()
    fresh.load_state_dict(state)
    assert fresh.best_val2 == 40.0 and fresh.final_metrics() == problem.final_metrics()
    assert fresh.final_metrics()["mean/accuracy"] == 40.0


def test_before_any_evaluation_there_is_no_best_score_to_report(monkeypatch):
    problem = _problem()
    assert problem.final_metrics() == {}
    fresh = _problem()
    fresh.load_state_dict(problem.state_dict())
    assert fresh.best_val2 is None
    monkeypatch.setattr(hc_agent, "evaluate", lambda model, splits: {"accuracy": torch.tensor([0.0, 0.0]),
                                                                     "f1": torch.tensor([0.0, 0.0])})  # fmt: skip
    fresh.evaluate()  # an accuracy of 0 % is still the best so far
    assert fresh.final_metrics()["best_val2_accuracy"] == 0.0 and fresh.final_metrics()["mean/accuracy"] == 0.0
