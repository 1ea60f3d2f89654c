"""``TaskSpec`` (morl/tasks.py): output size and metric per kind, and one line per bad spec."""

import pytest

from morl.tasks import TaskSpec


def test_output_size_and_metric_follow_the_kind():
    digits = TaskSpec("digits", "classification", num_classes=10)
    price = TaskSpec("price", "regression")
    assert (digits.out_dim, digits.metric) == (10, "accuracy")
    assert (price.out_dim, price.metric) == (1, "mse")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kind": "ranking"}, "task 't': kind 'ranking' is not valid; allowed: classification, regression"),
        ({"kind": "classification", "num_classes": 1}, "task 't': a classification task needs num_classes >= 2, got 1"),
    ],
)
def test_a_bad_spec_is_one_line(kwargs, message):
    with pytest.raises(ValueError) as err:
        TaskSpec("t", **kwargs)
    assert str(err.value) == message
