"""A spec expanded into cells: base config x list entry x grid point x seed, each with a
deterministic, filesystem-safe, unique name (``aggregator.name=mgda, seed 1`` -> ``mgda-s1``)."""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from morl.runners.errors import UserError
from morl.runners.sweep.kinds import command_of_config, seed_key
from morl.runners.sweep.spec import SweepSpec

RESERVED = {"logs", "manifest.json", "status.json"}  # files of the sweep directory itself


@dataclass(frozen=True)
class Cell:
    name: str
    command: str
    config: str  # absolute path of the base config
    overrides: tuple[str, ...]  # key=value, exactly as passed to `morl <command>`
    group: dict[str, Any]  # what varies across cells (the seed aside): the comparison's method
    seed: int | None

    @property
    def run_dir(self) -> str:
        return self.name  # relative to the sweep directory

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "overrides": list(self.overrides), "run_dir": self.run_dir}


def override_text(key: str, value: Any) -> str:
    """``key=value`` such that the config loader's YAML parse gives ``value`` back."""
    if isinstance(value, str) and value == value.strip() and _reads_back(value):
        return f"{key}={value}"
    # YAML's own writer: JSON would give 1e-05, which YAML 1.1 reads back as a string
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=float("inf"))
    return f"{key}={text.removesuffix(chr(10)).removesuffix(chr(10) + '...')}"


def _reads_back(text: str) -> bool:
    try:
        return yaml.safe_load(text or "''") == text
    except yaml.YAMLError:  # e.g. "*x" (an alias) or "@x": quote it
        return False


def expand(spec: SweepSpec) -> list[Cell]:
    grid_points = [dict(zip(spec.grid, values)) for values in itertools.product(*spec.grid.values())]
    entries = list(spec.entries) or [{}]
    cells, taken = [], set(RESERVED)
    fixed = {k for k, values in spec.grid.items() if len(values) == 1}  # the same in every cell: not in names
    for base in spec.bases:
        command = spec.command or command_of_config(base)
        _check_disjoint(spec, command)
        for entry, point, seed in itertools.product(entries, grid_points, spec.seeds or (None,)):
            group = {**({"base": Path(base).stem} if len(spec.bases) > 1 else {}), **entry, **point}
            values = {**spec.overrides, **entry, **point, **({seed_key(command): seed} if seed is not None else {})}
            named = {k: v for k, v in group.items() if k not in fixed}
            name = _unique(_name(base, named, seed), taken)
            overrides = tuple(override_text(k, v) for k, v in values.items())
            cells.append(Cell(name, command, str(Path(base).resolve()), overrides, group, seed))
    return cells


def _check_disjoint(spec: SweepSpec, command: str) -> None:
    """Each key set in one place only: which value wins would otherwise be a guess."""
    sources = [("overrides", set(spec.overrides)), ("grid", set(spec.grid))]
    sources += [(f"list[{i}]", set(e)) for i, e in enumerate(spec.entries)]
    if spec.seeds:
        sources.append(("seeds", {seed_key(command)}))
    for (a, keys_a), (b, keys_b) in itertools.combinations(sources, 2):
        if a.startswith("list") and b.startswith("list"):
            continue  # list entries are alternatives
        both = sorted(keys_a & keys_b)
        if both:
            raise UserError(f"sweep spec: {both[0]} is set both in {a} and in {b}; set each key in one place")


def _label(key: str, value: Any) -> str:
    """A value as a name part: a string as is, a number or list after its key's last part
    (``actor_lr0.001``), a mapping item by item (``{c: 0.5}`` -> ``c0.5``); empty values say
    nothing and are left out."""
    if value is None or value == "" or value == [] or value == {}:
        return ""
    if isinstance(value, str):
        return _safe(value)
    if isinstance(value, dict):
        return "_".join(filter(None, (_item(str(k), v) for k, v in value.items())))
    return _item(key.rsplit(".", 1)[-1], value)


def _item(name: str, value: Any) -> str:
    if isinstance(value, str):
        return _safe(f"{name}_{value}")
    return _safe(name + override_text(name, value).split("=", 1)[1])


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.") or "x"


def _name(base: str, group: dict[str, Any], seed: int | None) -> str:
    parts = [label for label in (_label(k, v) for k, v in group.items()) if label]
    parts += [f"s{seed}"] if seed is not None else []
    return "-".join(parts) or _safe(Path(base).stem)


def _unique(name: str, taken: set[str]) -> str:
    candidate, i = name, 2
    while candidate in taken:
        candidate, i = f"{name}-{i}", i + 1
    taken.add(candidate)
    return candidate
