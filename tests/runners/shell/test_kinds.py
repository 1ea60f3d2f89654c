"""The kinds of run (runners/shell/kinds.py): which class runs a kind, and how the kind of an
existing run directory is found (run.json, else the top-level keys of its config.yaml)."""

import json

import pytest

from morl.runners.errors import UserError
from morl.runners.shell import kinds


def test_legacy_run_directories_are_recognised_by_their_config_keys(tmp_path):
    for keys, kind in (
        (("prompts", "dispatcher"), "prompt"),
        (("strategy", "engine"), "fl"),
        (("data", "epochs"), "supervised"),
        (("run", "agent"), "rl"),
    ):
        run_dir = tmp_path / kind
        run_dir.mkdir()
        (run_dir / "config.yaml").write_text("".join(f"{k}: 1\n" for k in keys))
        assert kinds.kind_of(run_dir) == kind


def _run_dir(tmp_path, config: str, run_json: str | None = None):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(config)
    if run_json is not None:
        (run_dir / "run.json").write_text(run_json)
    return run_dir


def test_the_kind_in_run_json_wins_over_the_config_keys(tmp_path):
    run_dir = _run_dir(tmp_path, "data: 1\nepochs: 1\n", json.dumps({"kind": "forum"}))  # keys say supervised
    assert kinds.kind_of(run_dir) == "forum"


@pytest.mark.parametrize("run_json", [json.dumps({"kind": "no-such-kind"}), json.dumps(["rl"]), "{not json", None])
def test_without_a_known_kind_in_run_json_the_config_keys_decide(tmp_path, run_json):
    assert kinds.kind_of(_run_dir(tmp_path, "strategy: 1\nengine: 1\n", run_json)) == "fl"


@pytest.mark.parametrize(
    ("config", "kind"),
    [
        ({"front": {}, "env": {"name": "mt10"}}, "mo"),  # a front section: multi-objective
        ({"env": {"name": "mo-hopper-v5"}}, "mo"),  # an MO-Gymnasium env
        ({"env": {"name": "mt10"}, "agent": {}}, "rl"),
        ({"env": "mo-hopper-v5"}, "rl"),  # not a section: no env name to read
        ({"data": 1}, "rl"),  # only one of supervised's two keys
        ({"problem": 1, "forum": 1}, "forum"),
        ({"prompts": 1, "dispatcher": 1, "data": 1, "epochs": 1}, "prompt"),  # the first match
    ],
)
def test_kind_of_config_reads_the_top_level_keys(config, kind):
    assert kinds.kind_of_config(config) == kind


def test_every_kind_names_an_experiment_class_of_that_kind():
    for kind in ("rl", "mo"):
        cls = kinds.experiment_class(kind)
        assert cls.kind == kind and cls.command == "train"
    with pytest.raises(UserError, match="unknown kind of run 'nope'; valid names: .*supervised"):
        kinds.experiment_class("nope")
