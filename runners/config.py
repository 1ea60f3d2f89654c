"""Typed configs: YAML file + ``key=value`` overrides, validated against nested dataclasses.

Every runner declares its config as a dataclass tree. Loading checks each key and type and
fails with one line naming the key and what is allowed, before anything is written.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from morl.runners.errors import UserError


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        raise UserError(
            f"config {str(path)!r} is a directory; give a YAML file, e.g. {path / 'config.yaml'} or one from configs/"
        )
    if not path.is_file():
        raise UserError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"config file {str(path)!r} is not a text file (not UTF-8); give a YAML config") from None
    except yaml.YAMLError as exc:
        raise UserError(f"config file {str(path)!r} is not valid YAML{_where(exc)}: {_problem(exc)}") from None
    if data is None:
        # An empty file would silently run every default (MT10 for 2M steps): refuse it.
        raise UserError(f"config file {str(path)!r} is empty; copy one from configs/ and edit it")
    if not isinstance(data, dict):
        raise UserError(f"config file {str(path)!r} must hold a mapping at the top level, got {type(data).__name__}")
    return data


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"


def _problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    return problem if problem else str(exc).splitlines()[0]


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides; values are parsed as YAML scalars/lists/maps."""
    for item in overrides:
        if "=" not in item:
            raise UserError(f"override {item!r} must look like key=value (e.g. agent.batch_size=256)")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(parts):
            raise UserError(f"override {item!r} has an empty key part")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = data
        for part in parts[:-1]:
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                raise UserError(f"override {item!r}: {part!r} is not a section")
            node = node[part]
        node[parts[-1]] = value
    return data


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    if origin is not None:
        return getattr(origin, "__name__", str(origin))
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for arg in get_args(tp):
            try:
                return _coerce(value, arg, key)
            except UserError:
                continue
        raise UserError(f"{key}: expected {_type_name(tp)}, got {value!r}")
    if tp is type(None):
        if value is None:
            return None
        raise UserError(f"{key}: expected null, got {value!r}")
    if origin is Literal:
        if value in get_args(tp):
            return value
        raise UserError(f"{key}: {value!r} is not allowed; allowed: {', '.join(repr(a) for a in get_args(tp))}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise UserError(f"{key}: expected a section (mapping), got {value!r}")
        return from_dict(tp, value, prefix=key + ".")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{key}: expected a list, got {value!r}")
        (item_tp,) = get_args(tp)[:1] or (Any,)
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise UserError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                value = float(value)  # YAML reads 2e6 (no dot) as a string
            except ValueError:
                pass
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise UserError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)  # YAML reads 3e-4 (no dot) as a string
            except ValueError:
                pass
        raise UserError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise UserError(f"{key}: expected a string, got {value!r}")
    return value


def from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Build dataclass ``cls`` from ``data``; unknown keys and wrong types raise ``UserError``."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UserError(
            f"unknown config key {prefix + unknown[0]!r}; allowed keys{' in ' + prefix.rstrip('.') if prefix else ''}: "
            + ", ".join(sorted(fields))
        )
    kwargs = {name: _coerce(value, hints[name], prefix + name) for name, value in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise UserError(f"{prefix.rstrip('.') or 'config'}: {exc}") from None


def to_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj


def load_config(cls: type, path: str | os.PathLike | None, overrides: list[str] | None = None) -> Any:
    """Read ``path`` (may be None for all defaults), apply ``overrides``, validate as ``cls``."""
    data = read_yaml(path) if path is not None else {}
    data = apply_overrides(data, list(overrides or []))
    return from_dict(cls, data)


def save_config(cfg: Any, path: str | os.PathLike) -> None:
    from morl.runners.checkpoint import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))


# Range rules of `require`: (test, what is allowed). "?" after a rule also allows null.
_RULES = {
    ">=1": (lambda v: v >= 1, "must be >= 1"),
    ">0": (lambda v: v > 0, "must be > 0"),
    ">=0": (lambda v: v >= 0, "must be >= 0"),
    "[0,1)": (lambda v: 0 <= v < 1, "must be in [0, 1)"),
    "[0,1]": (lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    "(0,1]": (lambda v: 0 < v <= 1, "must be in (0, 1]"),
}


def require(cfg: Any, rules: dict[str, str], prefix: str = "") -> None:
    """Check ranges of config values, ``{"dotted.key": rule}`` with rules ``">=1"``, ``">0"``,
    ``">=0"``, ``"[0,1)"``, ``"[0,1]"``, ``"(0,1]"`` (add ``"?"`` to also allow null; a list value must
    satisfy the rule element-wise): one ``UserError`` line naming the first bad key, its value
    and what is allowed (``prefix`` names the section ``cfg`` is, e.g. ``"run."``). The one
    validation helper of every kind of run."""
    for key, rule in rules.items():
        value = cfg
        for part in key.split("."):
            value = getattr(value, part)
        nullable = rule.endswith("?")
        test, allowed = _RULES[rule.rstrip("?")]
        if value is None and nullable:
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        if (
            value is None
            or not items
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and test(v) for v in items)
        ):
            what = f"{allowed}{' or null' if nullable else ''}{' (each entry, at least one)' if isinstance(value, (list, tuple)) else ''}"
            raise UserError(f"{prefix}{key} {what}, got {value!r}")
