"""``morl prompt`` config: the documented defaults, the shipped configs, and ``validate``: the first
bad value is one line naming the key, the value and what is allowed; the bounds themselves pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from morl.runners.config import load_config
from morl.runners.errors import UserError
from morl.runners.prompt.config import PromptConfig, validate

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def _validated(*overrides):
    cfg = load_config(PromptConfig, None, list(overrides))
    validate(cfg)
    return cfg


def test_the_defaults_are_the_documented_length_and_cadence():
    cfg = PromptConfig()
    # docs/configs.md: steps 100, log_every 1, eval_every 25, checkpoint_every 50, checkpoint_minutes null
    assert (cfg.steps, cfg.log_every, cfg.eval_every, cfg.checkpoint_every) == (100, 1, 25, 50)
    assert cfg.checkpoint_minutes is None
    assert (cfg.method, cfg.prompts.num, cfg.prompts.length, cfg.encoder) == ("most", 3, 4, "minilm")
    validate(cfg)


@pytest.mark.parametrize("method", ["most", "mgda", "linear"])
def test_each_shipped_config_trains_the_method_it_is_named_after(method):
    cfg = load_config(PromptConfig, CONFIGS / f"prompt_{method}.yaml")
    validate(cfg)
    assert cfg.method == method and cfg.name == f"prompt_{method}"


@pytest.mark.parametrize(
    "override, message",
    [
        ("threads=-1", "threads must be >= 0, got -1"),
        ("steps=0", "steps must be >= 1, got 0"),
        ("batch_size=0", "batch_size must be >= 1, got 0"),
        ("log_every=0", "log_every must be >= 1, got 0"),
        ("max_length=0", "max_length must be >= 1, got 0"),
        ("checkpoint_minutes=0", "checkpoint_minutes must be > 0 or null, got 0.0"),
        ("prompts.num=0", "prompts.num must be >= 1, got 0"),
        ("optim.lr=0", "optim.lr must be > 0, got 0.0"),
        ("most.tau=-0.5", "most.tau must be >= 0, got -0.5"),
        ("most.curriculum_decay=0", "most.curriculum_decay must be in (0, 1], got 0.0"),
        ("most.curriculum_decay=1.5", "most.curriculum_decay must be in (0, 1], got 1.5"),
        ("device=gpu", "device 'gpu' is not valid; allowed: auto, cpu, cuda, cuda:N"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key_and_what_is_allowed(override, message):
    with pytest.raises(UserError) as err:
        _validated(override)
    assert str(err.value) == message


def test_the_bounds_themselves_are_allowed():
    cfg = _validated("threads=0", "most.tau=0", "most.curriculum_decay=1", "checkpoint_minutes=null", "steps=1")
    assert (cfg.threads, cfg.most.tau, cfg.most.curriculum_decay, cfg.checkpoint_minutes) == (0, 0.0, 1.0, None)


@pytest.mark.parametrize(
    "override, message",
    [
        ("method=adam", "method: 'adam' is not allowed; allowed: 'most', 'mgda', 'linear'"),
        ("most.solver=exact", "most.solver: 'exact' is not allowed; allowed: 'ipot', 'sinkhorn'"),
        ("dispatcher.target=soft", "dispatcher.target: 'soft' is not allowed; allowed: 'ot', 'argmin'"),
        ("prompts.size=3", "unknown config key 'prompts.size'; allowed keys in prompts: length, num, shared_head"),
    ],
)
def test_a_value_outside_the_schema_is_one_line_naming_the_allowed_ones(override, message):
    with pytest.raises(UserError) as err:
        load_config(PromptConfig, None, [override])
    assert str(err.value) == message
