"""The sweep spec, read and checked: every key into the spec with its documented default, every
mistake one line naming the key before anything is written or run."""

import pytest
import yaml

from morl.runners.errors import UserError
from morl.runners.sweep.spec import load_spec
from tests.runners.sweep.sweeps import QUICK, write_spec


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"grid": {}}, "grid is empty"),
        ({"grid": {"aggregator.name": []}}, "aggregator.name must be a non-empty list"),
        ({"grids": {}}, "unknown sweep key 'grids'; allowed keys: name, out_dir, base"),
        ({"seeds": [1, 1]}, "seeds lists a seed twice"),
        ({"seeds": ["a"]}, "seeds must be a non-empty list of integers"),
        ({"command": "learn"}, "command 'learn' is not allowed; allowed: train, supervised, forum, fl, prompt"),
        ({"base": "nope.yaml"}, "base config 'nope.yaml' does not exist"),
        ({"name": "a/b"}, "name must be a non-empty string of letters"),
        ({"resources": {"cpus": 0}}, "resources.cpus must be an integer >= 1"),
        ({"resources": {"memory": 1}}, "resources must be a mapping with keys cpus and gpus"),
        ({"max_retries": -1}, "max_retries must be an integer >= 0"),
        ({"list": [{}]}, "list entries must each set at least one key"),
        ({"grid": {"bad key": [1]}}, "'bad key' is not a config key"),
    ],
)
def test_bad_specs_stop_with_one_line(tmp_path, keys, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_spec(write_spec(tmp_path, **keys))


def test_a_spec_of_name_and_base_alone_takes_the_documented_defaults(tmp_path):
    # docs/sweeps.md: out_dir runs/sweeps, max_retries 1, resources {cpus: 1, gpus: 0}; no
    # command (each base config's own kind), no grid, list or seeds
    path = tmp_path / "spec.yaml"
    path.write_text(f"name: s\nbase: {QUICK}\n")
    assert load_spec(path).as_dict() == {
        "name": "s",
        "out_dir": "runs/sweeps",
        "base": [QUICK],
        "command": None,
        "grid": {},
        "list": [],
        "seeds": [],
        "overrides": {},
        "resources": {"cpus": 1, "gpus": 0.0},
        "max_retries": 1,
    }


def test_every_key_is_read_into_the_spec_and_zero_is_allowed_where_the_bound_is_zero(tmp_path):
    path = write_spec(
        tmp_path,
        command="train",
        grid={"aggregator.name": ["mgda", "pcgrad"], "a.b": [1, "1"]},  # 1 and "1" are two values
        list=[{"agent.actor_lr": 0.001}],
        seeds=[0, 3],
        overrides={"run.total_steps": 50},
        resources={"cpus": 2, "gpus": 0.5},
        max_retries=0,
    )
    spec = load_spec(path)
    assert spec.as_dict() == {
        "name": "s",
        "out_dir": str(tmp_path / "out"),
        "base": [QUICK],
        "command": "train",
        "grid": {"aggregator.name": ["mgda", "pcgrad"], "a.b": [1, "1"]},
        "list": [{"agent.actor_lr": 0.001}],
        "seeds": [0, 3],
        "overrides": {"run.total_steps": 50},
        "resources": {"cpus": 2, "gpus": 0.5},
        "max_retries": 0,
    }
    assert (spec.bases, spec.seeds, spec.resources.cpus, spec.resources.gpus) == ((QUICK,), (0, 3), 2, 0.5)
    # a whole number of GPUs is read as a float, an empty overrides section as no overrides
    spec = load_spec(write_spec(tmp_path, resources={"gpus": 1}, overrides=None))
    assert (spec.resources.cpus, spec.resources.gpus, spec.overrides) == (1, 1.0, {})
    assert isinstance(spec.resources.gpus, float)


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"name": None}, "name must be a non-empty string of letters, digits, '.', '_' and '-', got None"),
        ({"name": ""}, "name must be a non-empty string of letters, digits, '.', '_' and '-', got ''"),
        ({"out_dir": ""}, "out_dir must be a non-empty string (a path), got ''"),
        ({"base": []}, "base must be a config path or a non-empty list of config paths, got []"),
        ({"list": []}, "list must be a non-empty list of override mappings, got []"),
        ({"list": ["a.b=1"]}, "list[0] must be a mapping of dotted config keys to values, got 'a.b=1'"),
        ({"grid": {"a.b": [1, 1]}}, "grid: a.b lists a value twice: [1, 1]"),
        ({"grid": {"a.b": 1}}, "grid: a.b must be a non-empty list of values, got 1"),
        ({"overrides": ["a.b=1"]}, "overrides must be a mapping of dotted config keys to values, got ['a.b=1']"),
        ({"overrides": []}, "overrides must be a mapping of dotted config keys to values, got []"),
        ({"resources": 0}, "resources must be a mapping with keys cpus and gpus, got 0"),
        ({"overrides": {"a..b": 1}}, "overrides: 'a..b' is not a config key"),
        ({"overrides": {"1a": 1}}, "overrides: '1a' is not a config key"),
        ({"seeds": [-1]}, "seeds must be a non-empty list of integers >= 0, got [-1]"),
        ({"seeds": []}, "seeds must be a non-empty list of integers >= 0, got []"),
        ({"seeds": [True]}, "seeds must be a non-empty list of integers >= 0, got [True]"),  # a bool is no seed
        ({"max_retries": True}, "max_retries must be an integer >= 0, got True"),
        ({"max_retries": 1.5}, "max_retries must be an integer >= 0, got 1.5"),
        ({"resources": {"cpus": True}}, "resources.cpus must be an integer >= 1, got True"),
        ({"resources": {"gpus": -0.5}}, "resources.gpus must be a number >= 0, got -0.5"),
        ({"resources": {"gpus": True}}, "resources.gpus must be a number >= 0, got True"),
        ({"resources": [1]}, "resources must be a mapping with keys cpus and gpus, got [1]"),
        ({"command": "mo"}, "command 'mo' is not allowed"),  # a kind, not a subcommand
    ],
)
def test_each_mistake_is_one_line_naming_the_spec_file_and_the_key(tmp_path, keys, message):
    path = write_spec(tmp_path, **keys)
    with pytest.raises(UserError) as caught:
        load_spec(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


def test_two_base_configs_with_the_same_file_name_stop_with_one_line(tmp_path):
    # the file name names the cells: a/c.yaml and b/c.yaml would give two cells of one name
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "c.yaml").write_text(yaml.safe_dump({"run": {"seed": 0}}))
    bases = [str(tmp_path / "a" / "c.yaml"), str(tmp_path / "b" / "c.yaml")]
    with pytest.raises(UserError, match="base configs must have different file names"):
        load_spec(write_spec(tmp_path, base=bases))
    assert load_spec(write_spec(tmp_path, base=[bases[0], QUICK])).bases == (bases[0], QUICK)
