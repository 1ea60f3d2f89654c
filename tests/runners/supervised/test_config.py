"""``morl supervised`` config: the keys and defaults are those docs/supervised.md documents, the
shipped configs load with the aggregator they are named after, and a value outside the schema is
one line naming what is allowed."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from morl.runners.config import load_config
from morl.runners.errors import UserError
from morl.runners.supervised.config import SupervisedConfig

ROOT = Path(__file__).resolve().parents[3]


def _documented_keys() -> set[str]:
    """The backticked keys of the first column of docs/supervised.md's config table."""
    doc = (ROOT / "docs" / "supervised.md").read_text()
    table = doc.split("Keys (`runners/supervised/config.py`):", 1)[1].split("\n\n", 2)[1]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {key for row in rows for key in re.findall(r"`([^`]+)`", row.split("|")[1])}


def _config_keys(cls, prefix="") -> set[str]:
    out = set()
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default_factory if f.default_factory is not dataclasses.MISSING else None):
            out |= _config_keys(f.default_factory, f"{prefix}{f.name}.")
        else:
            out.add(prefix + f.name)
    return out


def test_every_key_is_documented_and_every_documented_key_exists():
    assert _config_keys(SupervisedConfig) == _documented_keys()


def test_the_defaults_are_the_documented_ones():
    cfg = SupervisedConfig()
    assert (cfg.name, cfg.seed, cfg.device, cfg.epochs, cfg.batch_size) == ("supervised", 0, "cpu", 30, 32)
    assert (cfg.data.name, cfg.data.options, cfg.model.hidden) == ("digits", {}, [64, 64])
    assert (cfg.aggregator.name, cfg.aggregator.options, cfg.ordering.name, cfg.ordering.options) == (
        "mean", {}, "random", {}
    )  # fmt: skip
    o = cfg.optim
    assert (o.name, o.lr, o.weight_decay, o.momentum) == ("adam", 1e-3, 0.0, 0.0)
    assert (cfg.task_weights, cfg.max_grad_norm, cfg.grad_wrt, cfg.max_nonfinite_updates) == (None, None, "params", 100)
    assert (cfg.eval_every, cfg.checkpoint_every, cfg.checkpoint_minutes, cfg.out_dir) == (1, 5, 15.0, "runs")
    assert cfg.baseline_run is None and cfg.baseline_metrics is None


@pytest.mark.parametrize(
    "name, data, aggregator",
    [
        ("supervised_digits_mean", "digits", "mean"),
        ("supervised_digits_mgda", "digits", "mgda"),
        ("supervised_digits_jogba", "digits", None),  # named after its ordering
        ("supervised_regression_mean", "regression", "mean"),
        ("supervised_regression_mgda", "regression", "mgda"),
        ("supervised_regression_pcgrad", "regression", "pcgrad"),
        ("supervised_regression_cagrad", "regression", "cagrad"),
    ],
)
def test_each_shipped_config_loads_with_its_data_and_the_aggregator_it_is_named_after(name, data, aggregator):
    cfg = load_config(SupervisedConfig, ROOT / "configs" / f"{name}.yaml")
    assert cfg.data.name == data
    if aggregator is None:
        assert cfg.ordering.name == "jogba"
    else:
        assert cfg.aggregator.name == aggregator


@pytest.mark.parametrize(
    "override, message",
    [
        ("optim.name=rmsprop", "optim.name: 'rmsprop' is not allowed; allowed: 'adam', 'sgd'"),
        ("grad_wrt=loss", "grad_wrt: 'loss' is not allowed; allowed: 'params', 'features'"),
        ("data.name=cifar", "data.name: 'cifar' is not allowed; allowed: 'digits', 'digits_pair', 'regression', "
                            "'mnist1d', 'file'"),
        ("task_weights=[1, a]", "task_weights: expected list or null, got [1, 'a']"),
        ("max_grad_norm=big", "max_grad_norm: expected float or null, got 'big'"),
        ("model.hidden=64", "model.hidden: expected a list, got 64"),
        ("optim.lr_decay=0.9", "unknown config key 'optim.lr_decay'; allowed keys in optim: lr, momentum, name, "
                               "weight_decay"),
    ],
)  # fmt: skip
def test_a_value_outside_the_schema_is_one_line_naming_what_is_allowed(override, message):
    with pytest.raises(UserError) as err:
        load_config(SupervisedConfig, None, [override])
    assert str(err.value) == message


def test_free_form_sections_take_any_mapping():
    cfg = load_config(
        SupervisedConfig,
        None,
        ["aggregator.options={c: 0.4}", "baseline_metrics={digit/accuracy: 0.9}", "task_weights=[1, 2]"],
    )
    assert cfg.aggregator.options == {"c": 0.4} and cfg.baseline_metrics == {"digit/accuracy": 0.9}
    assert cfg.task_weights == [1.0, 2.0]
