"""``morl fl`` config: the defaults are the synthetic configs' data, model and local training and
the documented cadence; ``validate`` names the first bad key in one line, the strategy's own checks
with their section, and writes nothing."""

import re
from pathlib import Path

import pytest

from morl.runners.cli import main as morl
from morl.runners.config import load_config
from morl.runners.errors import UserError
from morl.runners.fl.config import FLConfig, validate

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


@pytest.mark.parametrize(
    "bad, msg",
    [
        ("strategy.most.sample_fraction=0", "sample_fraction must be in \\(0, 1\\]"),
        ("strategy.most.sample_fraction=1.5", "sample_fraction must be in \\(0, 1\\]"),
        ("strategy.most.gamma_momentum=1.0", "gamma_momentum must be in \\[0, 1\\)"),
        ("strategy.most.gamma_momentum=-0.1", "gamma_momentum must be in \\[0, 1\\)"),
        ("strategy.most.ot_resolve=-1", "ot_resolve must be >= 0"),
        ("strategy.most.loss_source=end", "loss_source"),
    ],
)
def test_bad_values_give_one_line_errors(bad, msg, tmp_path, capsys):
    assert morl(["fl", "configs/fl_most_official.yaml", f"out_dir={tmp_path / 'runs'}", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("morl: error:") and "\n" not in err
    assert re.search(msg, err), err
    assert not (tmp_path / "runs").exists()  # no run directory


@pytest.mark.parametrize("name", ["fl_synthetic_most.yaml", "fl_synthetic_fedavg.yaml"])
def test_the_defaults_are_the_synthetic_configs_data_model_and_local_training(name):
    shipped, default = load_config(FLConfig, CONFIGS / name), FLConfig()
    assert (shipped.data, shipped.model, shipped.train) == (default.data, default.model, default.train)
    # docs/configs.md: 100 rounds, evaluation and checkpoint every 10, no wall-clock checkpoints
    t = default.train
    assert (t.rounds, t.eval_every, t.checkpoint_every, t.checkpoint_minutes) == (100, 10, 10, None)
    # the plain round of MosT unless the official code's options are asked for
    m = default.strategy.most
    assert (m.sample_fraction, m.loss_source, m.gamma_momentum, m.ot_resolve) == (1.0, "start", 0.0, 0)


def _validated(*overrides):
    cfg = load_config(FLConfig, None, ["device=cpu", *overrides])
    validate(cfg)
    return cfg


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lr_decay=0", "train.lr_decay must be in (0, 1], got 0.0"),
        ("train.lr_decay=1.01", "train.lr_decay must be in (0, 1], got 1.01"),
        ("train.batch_size=0", "train.batch_size must be >= 1, got 0"),
        ("strategy.num_models=0", "strategy.num_models must be >= 1, got 0"),
        ("strategy.prox_mu=-0.1", "strategy.prox_mu must be >= 0, got -0.1"),
        ("data.num_clients=0", "data.num_clients must be >= 1, got 0"),
        ("engine.num_cpus=0", "engine.num_cpus must be >= 1 or null, got 0"),
        ("engine.cpus_per_client=0", "engine.cpus_per_client must be > 0, got 0.0"),
        ("device=gpu", "device 'gpu' is not valid; allowed: auto, cpu, cuda, cuda:N"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key_and_what_is_allowed(override, message):
    with pytest.raises(UserError) as err:
        _validated(override)
    assert str(err.value) == message


def test_the_bounds_themselves_are_allowed():
    cfg = _validated("train.lr_decay=1", "strategy.prox_mu=0", "engine.num_cpus=null", "train.checkpoint_minutes=null")
    assert (cfg.train.lr_decay, cfg.strategy.prox_mu, cfg.engine.num_cpus) == (1.0, 0.0, None)


def test_the_strategys_own_check_is_one_line_under_its_section():
    with pytest.raises(UserError) as err:
        _validated("strategy.name=krum", "strategy.n_byzantine=2", "data.num_clients=6")
    assert str(err.value) == "strategy: krum with n_byzantine=2 needs at least 7 clients, got 6"
    _validated("strategy.name=krum", "strategy.n_byzantine=2", "data.num_clients=7")
    with pytest.raises(UserError, match=r"^strategy\.most: .*sample_fraction must be in \(0, 1\]"):
        _validated("strategy.name=most", "strategy.most.sample_fraction=0")
