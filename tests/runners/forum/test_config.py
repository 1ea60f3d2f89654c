"""``morl forum`` config: the defaults are the paper's hyper-cleaning settings and the documented
cadence, both shipped configs load, and a bad key or value is one line naming what is allowed
(and writes nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from morl.runners.config import load_config
from morl.runners.errors import UserError
from morl.runners.forum.config import ForumRunConfig
from tests.runners.forum.forum_cli import forum_cli

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def test_runner_rejects_bad_config_and_writes_nothing(tmp_path):
    from morl.runners.errors import UserError

    for bad, msg in [("forum.rhoo=1", "unknown config key"), ("problem=rl", "allowed"), ("iterations=0", "iterations"),
                     ("hypercleaning.datasets=7", "datasets")]:  # fmt: skip
        with pytest.raises(UserError, match=msg):
            forum_cli(["configs/forum_hypercleaning_digits.yaml", bad, f"out_dir={tmp_path}"])
    with pytest.raises(UserError, match="does not exist"):
        forum_cli([str(tmp_path / "missing.yaml")])
    assert list(tmp_path.iterdir()) == []


def test_the_defaults_are_the_papers_hyper_cleaning_run_and_the_documented_cadence():
    cfg = ForumRunConfig()
    # Ye et al. 2024, §5.1 (configs/forum_hypercleaning_digits.yaml): SGD lr 10 on the weights and 0.3 on the
    # model, T = 16 inner steps with eta = 0.3, rho = 0.5, beta_k = (k+1)^-0.75, K = 1200
    f, hc = cfg.forum, cfg.hypercleaning
    assert (cfg.problem, cfg.iterations, hc.alpha_lr, hc.omega_lr) == ("hypercleaning", 1200, 10.0, 0.3)
    assert (f.inner_steps, f.inner_lr, f.rho, f.beta_power) == (16, 0.3, 0.5, 0.75)
    # docs/forum.md: the paper's choices (warm start from ω_k, no normalised upper gradients, β by iteration)
    assert (f.warm_start, f.normalize_upper, f.beta_per_epoch, cfg.mtl.upper_split) == (True, False, False, "val")
    # docs/configs.md: eval_every 100, checkpoint_every 100, checkpoint_minutes 15
    assert (cfg.eval_every, cfg.checkpoint_every, cfg.checkpoint_minutes) == (100, 100, 15.0)


def test_the_shipped_configs_load_with_their_problem_and_the_papers_settings():
    hyper = load_config(ForumRunConfig, CONFIGS / "forum_hypercleaning_digits.yaml")
    assert hyper.problem == "hypercleaning" and hyper.hypercleaning.batch_size is None  # full batches
    mtl = load_config(ForumRunConfig, CONFIGS / "forum_mtl_digits.yaml")
    # §5.2: rho = 0.1, T = 5 inner steps with eta = 0.1, Adam lr 1e-3 on the weights
    assert mtl.problem == "mtl" and (mtl.forum.rho, mtl.forum.inner_steps, mtl.forum.inner_lr) == (0.1, 5, 0.1)
    assert mtl.mtl.alpha_lr == 1e-3 and mtl.mtl.data.options == {"tasks": ["digit", "parity", "large"]}


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "forum.rhoo=1",
            "unknown config key 'forum.rhoo'; allowed keys in forum: beta_per_epoch, beta_power, inner_lr, "
            "inner_steps, normalize_upper, rho, warm_start",
        ),
        ("problem=rl", "problem: 'rl' is not allowed; allowed: 'hypercleaning', 'mtl'"),
        ("mtl.upper_split=test", "mtl.upper_split: 'test' is not allowed; allowed: 'val', 'train'"),
        ("mtl.data.name=cifar", "mtl.data.name: 'cifar' is not allowed; allowed: 'digits', 'digits_pair'"),
        ("hypercleaning.batch_size=all", "hypercleaning.batch_size: expected int or null, got 'all'"),
        ("forum.warm_start=1", "forum.warm_start: expected true or false, got 1"),
    ],
)
def test_a_bad_key_or_value_is_one_line_naming_the_allowed_ones(override, message):
    with pytest.raises(UserError) as err:
        load_config(ForumRunConfig, None, [override])
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_null_is_allowed_where_the_config_says_so():
    cfg = load_config(ForumRunConfig, None, ["checkpoint_minutes=null", "hypercleaning.batch_size=64"])
    assert cfg.checkpoint_minutes is None and cfg.hypercleaning.batch_size == 64
