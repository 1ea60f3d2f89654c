"""Typed configs (runners/config.py): a YAML file plus ``key=value`` overrides, checked against a
dataclass tree; every mistake is one ``UserError`` line naming the key and what is allowed."""

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import pytest

from morl.runners.config import apply_overrides, from_dict, load_config, read_yaml, require, save_config
from morl.runners.errors import UserError


@dataclass
class Run:
    seed: int = 0
    lr: float = 1e-3
    mode: Literal["fast", "full"] = "fast"
    cuda: bool = False
    hidden: list[int] = field(default_factory=lambda: [64, 64])
    total: int | None = None
    options: dict = field(default_factory=dict)


@dataclass
class Cfg:
    name: str
    run: Run = field(default_factory=Run)


def _error(call, *args) -> str:
    with pytest.raises(UserError) as exc:
        call(*args)
    return str(exc.value)


# ---- read_yaml


def test_a_yaml_mapping_is_read_as_written(tmp_path):
    (tmp_path / "c.yaml").write_text("name: a\nrun:\n  seed: 3\n  hidden: [8, 4]\n")
    assert read_yaml(tmp_path / "c.yaml") == {"name": "a", "run": {"seed": 3, "hidden": [8, 4]}}


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "config file '{path}' is empty; copy one from configs/ and edit it"),
        ("# only a comment\n", "config file '{path}' is empty; copy one from configs/ and edit it"),
        ("- a\n- b\n", "config file '{path}' must hold a mapping at the top level, got list"),
        ("7\n", "config file '{path}' must hold a mapping at the top level, got int"),
        (
            "name: f\nrun: {seed: [1}\n",
            "config file '{path}' is not valid YAML at line 2, column 15: expected ',' or ']', but got '}'",
        ),
        (b"\x89PNG\r\n\x1a\n\xff", "config file '{path}' is not a text file (not UTF-8); give a YAML config"),
    ],
)
def test_a_file_that_is_no_yaml_mapping_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "c.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert _error(read_yaml, path) == message.replace("{path}", str(path))


def test_a_missing_file_and_a_folder_are_one_line_each(tmp_path):
    assert _error(read_yaml, tmp_path / "nope.yaml") == f"config file '{tmp_path / 'nope.yaml'}' does not exist"
    assert _error(read_yaml, tmp_path) == (
        f"config '{tmp_path}' is a directory; give a YAML file, e.g. {tmp_path / 'config.yaml'} or one from configs/"
    )


# ---- apply_overrides


def test_overrides_set_dotted_keys_to_yaml_values_and_create_missing_sections():
    data = {"run": {"seed": 0, "hidden": [64, 64]}, "empty": None}
    out = apply_overrides(
        data,
        [
            "run.seed=3",
            "run.hidden=[32, 16]",
            "run.lr=3e-4",  # YAML 1.1 reads this as a string; the typed check converts it
            "new.section.key=x",
            "empty.a=true",
            "name=",
            "label=a=b",  # the first '=' splits
            "raw={",  # not YAML: kept as written
        ],
    )
    assert out is data
    assert data == {
        "run": {"seed": 3, "hidden": [32, 16], "lr": "3e-4"},
        "empty": {"a": True},
        "new": {"section": {"key": "x"}},
        "name": "",
        "label": "a=b",
        "raw": "{",
    }


@pytest.mark.parametrize(
    "item, message",
    [
        ("seed", "override 'seed' must look like key=value (e.g. agent.batch_size=256)"),
        ("run..seed=1", "override 'run..seed=1' has an empty key part"),
        ("=1", "override '=1' has an empty key part"),
        ("run.seed.x=1", "override 'run.seed.x=1': 'seed' is not a section"),
    ],
)
def test_a_malformed_override_is_one_line(item, message):
    assert _error(apply_overrides, {"run": {"seed": 0}}, [item]) == message


# ---- from_dict / load_config


def test_values_are_checked_and_converted_to_the_declared_types(tmp_path):
    # YAML 1.1 reads 2e6 and 3e-4 (no dot) as strings; 4.0 is a whole number
    (tmp_path / "c.yaml").write_text("name: a\nrun:\n  seed: 4.0\n  lr: 3e-4\n  total: 2e6\n  hidden: [8]\n")
    cfg = load_config(Cfg, tmp_path / "c.yaml", ["run.mode=full", "run.cuda=true", "run.options={c: 0.5}"])
    assert cfg == Cfg(
        name="a", run=Run(seed=4, lr=0.0003, mode="full", cuda=True, hidden=[8], total=2_000_000, options={"c": 0.5})
    )
    assert type(cfg.run.seed) is int and type(cfg.run.total) is int and type(cfg.run.lr) is float


def test_an_integer_where_a_number_is_declared_becomes_a_float():
    lr = from_dict(Run, {"lr": 1}).lr
    assert lr == 1.0 and type(lr) is float


def test_no_path_means_every_default_with_the_overrides():
    assert load_config(Cfg, None, ["name=b"]) == Cfg(name="b", run=Run())


@pytest.mark.parametrize(
    "data, message",
    [
        ({"nme": "a"}, "unknown config key 'nme'; allowed keys: name, run"),
        (
            {"name": "a", "run": {"sead": 1}},
            "unknown config key 'run.sead'; allowed keys in run: cuda, hidden, lr, mode, options, seed, total",
        ),
        ({"name": 3}, "name: expected a string, got 3"),
        ({"name": "a", "run": 3}, "run: expected a section (mapping), got 3"),
        ({"name": "a", "run": {"seed": 1.5}}, "run.seed: expected an integer, got 1.5"),
        ({"name": "a", "run": {"seed": True}}, "run.seed: expected an integer, got True"),
        ({"name": "a", "run": {"seed": "ten"}}, "run.seed: expected an integer, got 'ten'"),
        ({"name": "a", "run": {"lr": "fast"}}, "run.lr: expected a number, got 'fast'"),
        ({"name": "a", "run": {"lr": False}}, "run.lr: expected a number, got False"),
        ({"name": "a", "run": {"cuda": 1}}, "run.cuda: expected true or false, got 1"),
        ({"name": "a", "run": {"mode": "slow"}}, "run.mode: 'slow' is not allowed; allowed: 'fast', 'full'"),
        ({"name": "a", "run": {"hidden": 64}}, "run.hidden: expected a list, got 64"),
        ({"name": "a", "run": {"hidden": [64, "x"]}}, "run.hidden[1]: expected an integer, got 'x'"),
        ({"name": "a", "run": {"total": "lots"}}, "run.total: expected int or null, got 'lots'"),
        ({"name": "a", "run": {"options": [1]}}, "run.options: expected a mapping, got [1]"),
    ],
)
def test_a_wrong_key_or_type_is_one_line_naming_the_key_and_what_is_allowed(data, message):
    assert _error(from_dict, Cfg, data) == message


def test_a_missing_required_key_names_it():
    message = _error(from_dict, Cfg, {"run": {"seed": 1}})
    assert message.startswith("config: ") and "missing 1 required positional argument: 'name'" in message


def test_null_is_taken_only_where_it_is_allowed():
    assert from_dict(Run, {"total": None}).total is None
    assert _error(from_dict, Run, {"seed": None}) == "seed: expected an integer, got None"


# ---- save_config


def test_a_saved_config_is_plain_yaml_in_field_order_and_loads_back_equal(tmp_path):
    cfg = Cfg(name="a", run=Run(seed=2, hidden=[8, 4], options={"c": 0.5}))
    save_config(cfg, tmp_path / "config.yaml")
    assert (tmp_path / "config.yaml").read_text() == (
        "name: a\n"
        "run:\n"
        "  seed: 2\n"
        "  lr: 0.001\n"
        "  mode: fast\n"
        "  cuda: false\n"
        "  hidden:\n"
        "  - 8\n"
        "  - 4\n"
        "  total: null\n"
        "  options:\n"
        "    c: 0.5\n"
    )
    assert load_config(Cfg, tmp_path / "config.yaml") == cfg
    assert dataclasses.asdict(load_config(Cfg, tmp_path / "config.yaml")) == dataclasses.asdict(cfg)


# ---- require


@pytest.mark.parametrize(
    "rule, allowed, refused, says",
    [
        (">=1", [1, 2, 10**9], [0, 0.5, -1], "must be >= 1"),
        (">0", [1e-9, 1, 7], [0, -1e-9], "must be > 0"),
        (">=0", [0, 0.0, 3], [-1, -1e-9], "must be >= 0"),
        ("[0,1)", [0, 0.5, 0.999], [1, -0.1, 1.5], "must be in [0, 1)"),
        ("[0,1]", [0, 0.5, 1], [-0.1, 1.01], "must be in [0, 1]"),
        ("(0,1]", [1e-9, 0.5, 1], [0, 1.01], "must be in (0, 1]"),
    ],
)
def test_require_accepts_the_range_s_boundaries_exactly_as_its_rule_writes_them(rule, allowed, refused, says):
    from types import SimpleNamespace

    for value in allowed:
        require(SimpleNamespace(x=value), {"x": rule})
    for value in refused:
        assert _error(require, SimpleNamespace(x=value), {"x": rule}) == f"x {says}, got {value!r}"


def test_require_names_the_section_and_treats_an_empty_list_as_bad():
    from types import SimpleNamespace

    cfg = SimpleNamespace(run=SimpleNamespace(widths=[], seed=None))
    require(cfg, {"run.seed": ">=0?"})  # null allowed
    assert _error(require, cfg, {"run.seed": ">=0"}, "cfg.") == "cfg.run.seed must be >= 0, got None"
    assert (
        _error(require, cfg, {"run.widths": ">=1?"})
        == "run.widths must be >= 1 or null (each entry, at least one), got []"
    )


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"a": ">=1"}, "sec.a must be >= 1, got 0"),
        ({"b": ">0?"}, "sec.b must be > 0 or null, got -1.5"),
        ({"c.d": "[0,1)"}, "sec.c.d must be in [0, 1), got 1.0"),
        ({"e": ">=1"}, "sec.e must be >= 1 (each entry, at least one), got [4, 0]"),
        ({"f": ">=1"}, "sec.f must be >= 1, got None"),
        ({"g": ">0"}, "sec.g must be > 0, got True"),
    ],
)
def test_require_names_the_key_its_value_and_what_is_allowed(rules, message):
    from types import SimpleNamespace

    from morl.runners.config import require
    from morl.runners.errors import UserError

    cfg = SimpleNamespace(a=0, b=-1.5, c=SimpleNamespace(d=1.0), e=[4, 0], f=None, g=True, ok=3, none=None)
    require(cfg, {"ok": ">=1", "none": ">=1?", "c.d": "[0,1]"}, prefix="sec.")  # passes
    with pytest.raises(UserError) as exc:
        require(cfg, rules, prefix="sec.")
    assert str(exc.value) == message
