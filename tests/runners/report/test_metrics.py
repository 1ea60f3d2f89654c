"""`morl report`'s metric names: each kind's headline, the direction and best possible score read
from a name, and every spelling of a metric the runners' records use."""

import math

import numpy as np
import pytest

from morl.runners.report.metrics import DEFAULT, KINDS, Metric, default_metric, describe, lookup, names_in

# -- direction and best possible score -----------------------------------------------------


@pytest.mark.parametrize(
    "name, values, higher, best",
    [
        ("eval/success", [0.0, 0.75, 1.0], True, 1.0),  # a rate
        ("test/accuracy", [25.0, 50.0], True, 100.0),  # a rate logged in percent (FORUM)
        ("test_mean", [0.6, 0.8], True, 1.0),  # FL's mean client accuracy
        ("eval/hv", [3.0, 120.0], True, None),  # unbounded
        ("test/mse", [0.5, 2.0], False, None),  # lower is better, no best
        ("val/loss_acc", [0.5], False, None),  # "loss" wins over "acc": lower is better, so no best
        ("perf/step_ms", [3.0], False, None),
    ],
)
def test_direction_and_best_score_come_from_the_name_and_the_scale(name, values, higher, best):
    assert describe(name, np.array(values)) == Metric(name, higher, best)


def test_a_lower_is_better_metric_says_so_in_its_label():
    assert describe("test/mse", np.array([1.0])).label == "test/mse (lower is better)"
    assert describe("eval/success", np.array([1.0])).label == "eval/success"


def test_every_kind_has_its_documented_headline():
    assert KINDS == ("rl", "mo", "supervised", "forum", "fl", "prompt")
    assert [default_metric(kind, None) for kind in KINDS] == [
        "eval/success",
        "eval/hv",
        "test/accuracy",
        "test/accuracy",
        "test_mean",
        "test/routed_acc",
    ]
    assert set(DEFAULT) == set(KINDS)


def test_a_supervised_run_on_regressions_is_judged_by_its_test_mse():
    regression = {"directions": {"y0/mse": False, "y1/mse": False}}
    assert default_metric("supervised", regression) == "test/mse"
    mixed = {"directions": {"y0/mse": False, "digit/accuracy": True}}
    assert default_metric("supervised", mixed) == "test/accuracy"
    assert default_metric("supervised", {"directions": {}}) == "test/accuracy"
    # only supervised runs switch: a FORUM run's directions do not change its headline
    assert default_metric("forum", regression) == "test/accuracy"


# -- finding a metric in a record ----------------------------------------------------------


def test_a_per_task_dict_drops_its_mean_and_turns_null_into_nan():
    got = lookup({"eval/success": {"reach": 1, "push": 0.5, "door": None, "mean": 0.75}}, "eval/success")
    assert list(got) == ["reach", "push", "door"]
    assert got["reach"] == 1.0 and got["push"] == 0.5 and math.isnan(got["door"])


def test_a_list_is_per_task_by_position_and_a_number_is_one_column():
    assert lookup({"val/prompt_acc": [0.25, 0.5]}, "val/prompt_acc") == {"0": 0.25, "1": 0.5}
    assert lookup({"test_mean": 0.8}, "test_mean") == {"all": 0.8}


def test_a_section_holds_the_metric_per_task_or_as_one_number():
    record = {"test": {"digit/accuracy": 0.9, "parity/accuracy": 0.8, "digit/loss": 0.1, "routed_acc": 0.62}}
    assert lookup(record, "test/accuracy") == {"digit": 0.9, "parity": 0.8}
    assert lookup(record, "test/loss") == {"digit": 0.1}
    assert lookup(record, "test/routed_acc") == {"all": 0.62}


def test_forum_spellings_top_level_task_keys_and_underscores():
    loss_weights = {"test/a/accuracy": 75.0, "test/b/accuracy": 50.0, "test/a/b/accuracy": 1.0}
    assert lookup(loss_weights, "test/accuracy") == {"a": 75.0, "b": 50.0}  # three-part keys only
    hypercleaning = {"test_accuracy": {"dataset0": 90.0, "dataset1": 80.0, "mean": 85.0}}
    assert lookup(hypercleaning, "test/accuracy") == {"dataset0": 90.0, "dataset1": 80.0}


@pytest.mark.parametrize(
    "record",
    [
        {"eval/hv": 1.0},  # another metric
        {"eval/success": "high"},  # not a number
        {"eval/success": True},  # a bool is no score
        {"eval/success": {"reach": "yes"}},
        {"eval/success": {"mean": 0.5}},  # nothing but the mean
        {"eval/success": []},
    ],
)
def test_a_record_without_a_usable_value_gives_none(record):
    assert lookup(record, "eval/success") is None


def test_names_in_lists_what_a_record_offers_for_the_error_message():
    record = {
        "step": 10,
        "time": 1.5,
        "kind": "eval",
        "epoch": 2,
        "eval/success": {"reach": 1.0, "mean": 1.0},
        "test": {"digit/accuracy": 0.9, "parity/accuracy": 0.8, "digit/loss": 0.1, "routed_acc": 0.6},
        "val": {"prompt_acc": [0.1, 0.2], "oracle_acc": 0.7, "note": "text"},
        "headline": 0.5,
        "status": "ok",
    }
    assert names_in(record) == [
        "eval/success",
        "test/accuracy",
        "test/loss",
        "test/routed_acc",
        "val/prompt_acc",
        "val/oracle_acc",
        "headline",
    ]
