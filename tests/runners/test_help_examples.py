"""The examples each ``morl <command> --help`` prints are valid: the config files exist and the
example overrides pass the same parser and validation as a real start (nothing is trained)."""

import re
from pathlib import Path

import pytest

from morl.runners.cli import _parse, build_parser
from morl.runners.shell.kinds import KINDS, experiment_class

ROOT = Path(__file__).resolve().parents[2]
START = {}
for _kind in KINDS:  # `train` starts rl and mo runs: its help example is an rl config
    START.setdefault(experiment_class(_kind).command, _kind)


def _helps(command: str) -> dict[str, str]:
    """``{dest: help}`` of a subcommand's arguments."""
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    return {a.dest: a.help or "" for a in sub._actions}


def _example(text: str) -> str:
    return re.search(r"e\.g\. (.+?)(?: \(|$)", text).group(1)


@pytest.mark.parametrize("command", sorted(START))
def test_start_help_examples_load_and_validate(command, monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples name configs/ relative to the repository
    helps = _helps(command)
    config, overrides = _example(helps["config"]), _example(helps["overrides"]).split()
    assert Path(config).is_file() and overrides
    args = _parse(build_parser(), [command, config, *overrides])
    assert args.overrides == overrides  # every example is taken as an override
    cfg = experiment_class(START[command]).load_config(args.config, args.overrides)
    for item in overrides:
        key, value = item.split("=", 1)
        node = cfg
        for part in key.split("."):
            node = node[part] if isinstance(node, dict) else getattr(node, part)
        assert str(node) == value or (value == "{}" and node == {})


def test_resume_help_examples_are_keys_a_resume_may_change():
    text = _helps("resume")["overrides"]
    examples = re.findall(r"(\S+)=(\S+) \((\w+)\)", text)
    assert len(examples) == 2
    for key, _value, kind in examples:
        assert key in experiment_class(kind.lower()).resume_keys


def test_sb3_net_example_is_accepted():
    from morl.runners.sb3 import check_arguments

    args = build_parser().parse_args(["sb3", "--net", _example(_helps("sb3")["net"])])
    assert check_arguments(args) == [400, 400, 400]


def test_sweep_help_example_is_a_spec_that_loads(monkeypatch):
    from morl.runners.sweep.spec import load_spec

    monkeypatch.chdir(ROOT)
    assert load_spec(_example(_helps("sweep")["spec"]))


def test_bench_env_examples_are_env_names():
    from morl.envs import available_envs
    from morl.envs.metaworld_env import mt1_task_names

    names = re.search(r"e\.g\. (.+?) \(", _helps("bench")["env"]).group(1).split(", ")
    assert names == ["mt10", "mt1:reach-v3", "point_mass"]
    for name in names:
        assert name in available_envs() or (name.startswith("mt1:") and name[4:] in mt1_task_names())


def test_report_group_by_example_keys_are_keys_of_an_rl_config():
    from morl.runners.config import to_dict

    cfg = to_dict(experiment_class("rl").load_config(ROOT / "configs" / "mt10_cagrad.yaml", []))
    for key in _example(_helps("report")["group_by"]).split(","):
        node = cfg
        for part in key.split("."):
            assert part in node, key
            node = node[part]
