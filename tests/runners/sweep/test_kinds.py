"""Each kind of run's ``morl`` subcommand and seed key, and a config's subcommand from its keys."""

import pytest
import yaml

from morl.runners.errors import UserError
from morl.runners.sweep.kinds import check_command, command_of_config, kind_of_cell, seed_key

# top-level keys only each kind's config has (runners/shell/kinds.py), anything else is RL
CONFIGS = {
    "rl": {"env": {"name": "point_mass"}, "run": {"seed": 0}},
    "mo": {"env": {"name": "mo-hopper-v5"}, "run": {"seed": 0}},
    "mo_front": {"front": {"points": 4}, "run": {"seed": 0}},
    "supervised": {"data": {"name": "digits"}, "epochs": 3, "seed": 0},
    "forum": {"problem": {"name": "x"}, "forum": {"steps": 1}, "seed": 0},
    "fl": {"strategy": {"name": "fedavg"}, "engine": "inprocess", "train": {"seed": 0}},
    "prompt": {"prompts": 4, "dispatcher": {"name": "linear"}, "seed": 0},
}


def config(tmp_path, kind):
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(CONFIGS[kind]))
    return path


@pytest.mark.parametrize(
    "kind, command",
    [
        ("rl", "train"),
        ("mo", "train"),
        ("mo_front", "train"),
        ("supervised", "supervised"),
        ("forum", "forum"),
        ("fl", "fl"),
        ("prompt", "prompt"),
    ],
)
def test_a_config_is_run_by_its_kinds_subcommand(tmp_path, kind, command):
    assert command_of_config(config(tmp_path, kind)) == command


@pytest.mark.parametrize(
    "command, key",
    # docs/sweeps.md: run.seed (train), train.seed (fl: data.seed draws the clients' data), seed (others)
    [("train", "run.seed"), ("supervised", "seed"), ("forum", "seed"), ("fl", "train.seed"), ("prompt", "seed")],
)
def test_a_seed_goes_to_the_kinds_seed_key(command, key):
    assert seed_key(command) == key


def test_train_runs_multi_objective_configs_as_mo_and_the_others_as_rl(tmp_path):
    assert kind_of_cell("train", config(tmp_path, "mo")) == "mo"
    assert kind_of_cell("train", config(tmp_path, "mo_front")) == "mo"
    assert kind_of_cell("train", config(tmp_path, "rl")) == "rl"
    # every other command has one kind: the config is not read
    assert kind_of_cell("fl", tmp_path / "missing.yaml") == "fl"
    assert kind_of_cell("supervised", tmp_path / "missing.yaml") == "supervised"


def test_only_the_five_subcommands_that_start_runs_are_allowed():
    assert [check_command(c, "spec.yaml") for c in ("train", "supervised", "forum", "fl", "prompt")] == [
        "train",
        "supervised",
        "forum",
        "fl",
        "prompt",
    ]
    for command in ("mo", "rl", "resume", None, 1):
        with pytest.raises(UserError) as caught:
            check_command(command, "spec.yaml")
        assert str(caught.value) == (
            f"spec.yaml: command {command!r} is not allowed; allowed: train, supervised, forum, fl, prompt"
        )
