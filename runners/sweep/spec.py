"""The sweep spec (``configs/sweeps/*.yaml``, documented in docs/sweeps.md), read and validated.

Every mistake stops with one line naming the key and what is allowed, before anything is
written or run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from morl.runners.errors import UserError
from morl.runners.sweep.kinds import check_command

KEYS = ("name", "out_dir", "base", "command", "grid", "list", "seeds", "overrides", "resources", "max_retries")
NAME = re.compile(r"[A-Za-z0-9._-]+")
DOTTED_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Resources:
    cpus: int = 1  # threads of each run (OMP_NUM_THREADS) and CPUs Ray reserves for it
    gpus: float = 0.0  # GPUs Ray reserves for each run (the local engine ignores it)


@dataclass(frozen=True)
class SweepSpec:
    name: str
    out_dir: str
    bases: tuple[str, ...]
    command: str | None = None  # None: each base config's own kind
    grid: dict[str, list[Any]] = field(default_factory=dict)
    entries: tuple[dict[str, Any], ...] = ()  # the spec's `list`
    seeds: tuple[int, ...] = ()
    overrides: dict[str, Any] = field(default_factory=dict)
    resources: Resources = Resources()
    max_retries: int = 1

    def as_dict(self) -> dict[str, Any]:
        """The spec as written into manifest.json."""
        return {
            "name": self.name,
            "out_dir": self.out_dir,
            "base": list(self.bases),
            "command": self.command,
            "grid": self.grid,
            "list": [dict(e) for e in self.entries],
            "seeds": list(self.seeds),
            "overrides": self.overrides,
            "resources": {"cpus": self.resources.cpus, "gpus": self.resources.gpus},
            "max_retries": self.max_retries,
        }


def load_spec(path: str | Path) -> SweepSpec:
    from morl.runners.config import read_yaml

    data = read_yaml(path)
    where = str(path)
    unknown = sorted(set(data) - set(KEYS), key=str)
    if unknown:
        raise UserError(f"{where}: unknown sweep key {unknown[0]!r}; allowed keys: {', '.join(KEYS)}")
    return SweepSpec(
        name=_name(data.get("name"), where),
        out_dir=_string(data.get("out_dir", "runs/sweeps"), "out_dir", where),
        bases=_bases(data.get("base"), where),
        command=None if data.get("command") is None else check_command(data["command"], where),
        grid=_grid(data.get("grid"), where),
        entries=_entries(data.get("list"), where),
        seeds=_seeds(data.get("seeds"), where),
        overrides=_mapping(_or_empty(data.get("overrides")), "overrides", where),
        resources=_resources(_or_empty(data.get("resources")), where),
        max_retries=_count(data.get("max_retries", 1), "max_retries", where),
    )


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise UserError(f"{where}: name must be a non-empty string of letters, digits, '.', '_' and '-', got {value!r}")
    return value


def _string(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise UserError(f"{where}: {key} must be a non-empty string (a path), got {value!r}")
    return value


def _bases(value: Any, where: str) -> tuple[str, ...]:
    bases = [value] if isinstance(value, str) else value
    if not isinstance(bases, list) or not bases or not all(isinstance(b, str) and b for b in bases):
        raise UserError(f"{where}: base must be a config path or a non-empty list of config paths, got {value!r}")
    for base in bases:
        if not Path(base).is_file():
            raise UserError(
                f"{where}: base config {base!r} does not exist (paths are relative to the current directory)"
            )
    if len({Path(b).stem for b in bases}) != len(bases):
        raise UserError(f"{where}: base configs must have different file names (they name the cells), got {bases}")
    return tuple(bases)


def _key(key: Any, section: str, where: str) -> str:
    if not isinstance(key, str) or not DOTTED_KEY.fullmatch(key):
        raise UserError(f"{where}: {section}: {key!r} is not a config key; use dotted keys such as aggregator.name")
    return key


def _or_empty(value: Any) -> Any:
    """An absent or empty (``key:``) section is an empty mapping; any other value is checked as given."""
    return {} if value is None else value


def _mapping(value: Any, section: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"{where}: {section} must be a mapping of dotted config keys to values, got {value!r}")
    return {_key(k, section, where): v for k, v in value.items()}


def _grid(value: Any, where: str) -> dict[str, list[Any]]:
    if value is None:
        return {}
    grid = _mapping(value, "grid", where)
    if not grid:
        raise UserError(f"{where}: grid is empty; give {{dotted.key: [values]}} or leave grid out")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise UserError(f"{where}: grid: {key} must be a non-empty list of values, got {values!r}")
        if len({repr(v) for v in values}) != len(values):
            raise UserError(f"{where}: grid: {key} lists a value twice: {values!r}")
    return grid


def _entries(value: Any, where: str) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}: list must be a non-empty list of override mappings, got {value!r}")
    entries = tuple(_mapping(e, f"list[{i}]", where) for i, e in enumerate(value))
    if any(not e for e in entries):
        raise UserError(f"{where}: list entries must each set at least one key, got {value!r}")
    return entries


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
    ):
        raise UserError(f"{where}: seeds must be a non-empty list of integers >= 0, got {value!r}")
    if len(set(value)) != len(value):
        raise UserError(f"{where}: seeds lists a seed twice: {value!r}")
    return tuple(value)


def _count(value: Any, key: str, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise UserError(f"{where}: {key} must be an integer >= 0, got {value!r}")
    return value


def _resources(value: Any, where: str) -> Resources:
    if not isinstance(value, dict) or set(value) - {"cpus", "gpus"}:
        raise UserError(f"{where}: resources must be a mapping with keys cpus and gpus, got {value!r}")
    cpus, gpus = value.get("cpus", 1), value.get("gpus", 0)
    if not isinstance(cpus, int) or isinstance(cpus, bool) or cpus < 1:
        raise UserError(f"{where}: resources.cpus must be an integer >= 1, got {cpus!r}")
    if not isinstance(gpus, (int, float)) or isinstance(gpus, bool) or gpus < 0:
        raise UserError(f"{where}: resources.gpus must be a number >= 0, got {gpus!r}")
    return Resources(cpus, float(gpus))
