"""Read run directories (or a sweep directory) into one record per run: its kind, method label,
seed, the headline metric's learning curve and final value per task, and the series the plots
draw (aggregator weights, gradient-conflict statistics).

A run directory holds ``config.yaml`` and ``metrics.jsonl`` (one JSON line per record), and, for
``final_metrics.json`` (RL runs of the experiment shell too); runs of the shell also hold
``run.json`` (kind, status, position). A sweep directory holds ``manifest.json`` naming its run directories,
the group (override values) and the seed of each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from morl.runners.errors import UserError

from .metrics import Metric, default_metric, describe, lookup, names_in

MANIFEST = "manifest.json"
# Per-interval series plotted over time: (plot name, keys in the records, first found wins).
SERIES = {
    "weights": ("aggregator/weight", "loss_weights", "train/weights"),
    "conflicts": ("grad/cos_min", "grad/cos_mean", "grad/conflicting_pairs"),
}


@dataclass
class Source:
    path: Path
    group: dict[str, Any] | None = None  # the sweep cell's override values
    seed: int | None = None


@dataclass
class Series:
    steps: np.ndarray  # [S]
    values: np.ndarray  # [S, C]
    columns: list[str]


@dataclass
class Run:
    path: Path
    name: str
    kind: str
    label: str
    seed: int | None
    status: str | None
    metric: Metric
    tasks: list[str]
    steps: np.ndarray  # [E] evaluation points of the learning curve (may be empty)
    curve: np.ndarray  # [E, T]
    final: np.ndarray  # [T]
    final_step: int | None
    series: dict[str, Series] = field(default_factory=dict)
    front: np.ndarray | None = None  # [P, M] multi-objective runs: the final population's discounted returns
    objectives: list[str] = field(default_factory=list)


def find_sources(paths: list[str | Path]) -> tuple[list[Source], Path | None, list[str]]:
    """``(sources, sweep directory or None, notes)`` from a sweep directory or run directories."""
    paths = [Path(p) for p in paths]
    for p in paths:
        if not p.exists():
            raise UserError(f"{str(p)!r} does not exist; give a sweep directory (with {MANIFEST}) or run directories")
    if len(paths) == 1 and (paths[0] / MANIFEST).is_file():
        return _sweep_sources(paths[0])
    for p in paths:
        if (p / MANIFEST).is_file():
            raise UserError(f"{str(p)!r} is a sweep directory: give it alone, not together with other directories")
        if not (p / "config.yaml").is_file():
            raise UserError(f"{str(p)!r} is not a run directory (no config.yaml) nor a sweep directory (no {MANIFEST})")
    return [Source(p) for p in paths], None, []


def _sweep_sources(sweep: Path) -> tuple[list[Source], Path, list[str]]:
    manifest = _read_json(sweep / MANIFEST)
    cells = manifest.get("cells") if isinstance(manifest, dict) else None
    if not isinstance(cells, list):
        raise UserError(f"{str(sweep / MANIFEST)!r} has no list 'cells'; it is not a manifest written by `morl sweep`")
    sources, notes = [], []
    for cell in cells:
        if not isinstance(cell, dict) or "run_dir" not in cell:
            raise UserError(f"{str(sweep / MANIFEST)!r}: every cell needs a 'run_dir', got {cell!r}")
    varying = _varying_keys([cell.get("group") or {} for cell in cells])
    for cell in cells:
        path = sweep / cell["run_dir"]
        if not (path / "config.yaml").is_file():
            notes.append(f"{cell.get('name', cell['run_dir'])}: not started (no {path}/config.yaml), left out")
            continue
        group = {k: v for k, v in (cell.get("group") or {}).items() if k in varying}
        sources.append(Source(path, group, cell.get("seed")))
    return sources, sweep, notes


def _varying_keys(groups: list[dict[str, Any]]) -> set[str]:
    """Group keys whose value differs between cells: a key every cell shares names no method."""
    keys = {k for g in groups for k in g}
    return {k for k in keys if len({json.dumps(g.get(k), sort_keys=True, default=str) for g in groups}) > 1}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{str(path)!r} is not valid JSON ({exc.msg}, line {exc.lineno})") from None


def read_records(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl lines; a line that does not parse (the one a live run is writing) is skipped."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "step" in record:
            out.append(record)
    return out


def flatten(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def read_final(run_dir: Path, kind: str) -> dict[str, Any] | None:
    """The end-of-run metrics as one record: ``final_metrics.json`` (FORUM's own results are its
    ``forum`` section, as test metrics; FL's are its ``final`` row), or an older FL run's
    ``summary.json`` ``final`` row."""
    path = run_dir / "final_metrics.json"
    if kind == "fl" and not path.is_file():
        path = run_dir / "summary.json"
    if not path.is_file():
        return None
    final = _read_json(path)
    if not isinstance(final, dict):
        raise UserError(f"{str(path)!r} does not hold a JSON object")
    if kind == "forum":
        return {"test": final.get("forum", {})}
    if kind == "fl" and isinstance(final.get("final"), dict):
        return final["final"]
    return final


def read_run(source: Source, metric_name: str | None, group_by: list[str] | None, base: Path | None) -> Run | str:
    """One run's data, or a one-line note saying why it is left out (no evaluation yet)."""
    import yaml

    from morl.runners.shell.kinds import kind_of
    from morl.runners.shell.run_info import read_run_info

    path = source.path
    try:
        cfg = yaml.safe_load((path / "config.yaml").read_text()) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{str(path / 'config.yaml')!r} is not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{str(path / 'config.yaml')!r} does not hold a mapping of config keys")
    info = read_run_info(path) or {}
    kind = kind_of(path)  # run.json, else the config keys only each kind has
    records = read_records(path / "metrics.jsonl")
    final_record = read_final(path, kind)
    name = str(path.relative_to(base)) if base is not None else str(path)
    metric = metric_name or default_metric(kind, final_record)
    steps, rows = _curve(records, metric)
    final = lookup(final_record, metric) if final_record else None
    if final is None and not rows:
        return _missing(name, metric, metric_name, records, final_record)
    tasks = list((final or rows[-1]).keys())
    curve = np.array([[row.get(t, np.nan) for t in tasks] for row in rows]).reshape(len(rows), len(tasks))
    last = np.array([final.get(t, np.nan) for t in tasks]) if final is not None else curve[-1]
    curve = _same_scale(curve, last)
    flat = flatten(cfg)
    return Run(
        path=path, name=name, kind=kind, label=_label(flat, source.group, group_by, name), seed=_seed(flat, source.seed),
        status=info.get("status"), metric=describe(metric, np.concatenate([curve.ravel(), last])), tasks=tasks,
        steps=np.asarray(steps, dtype=np.int64), curve=curve, final=last,
        final_step=_final_step(final_record, steps, info), series=_series(records),
        **_front(final_record or {}),
    )  # fmt: skip


def _curve(records: list[dict[str, Any]], metric: str) -> tuple[list[int], list[dict[str, float]]]:
    by_step: dict[int, dict[str, float]] = {}
    for record in records:
        found = lookup(record, metric)
        if found is not None:
            by_step[int(record["step"])] = found  # a step logged twice (a resumed run): the later line wins
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def _same_scale(curve: np.ndarray, final: np.ndarray) -> np.ndarray:
    """The curve in the final value's scale: FORUM logs accuracies as fractions in its records
    but in percent in final_metrics.json, and best-over-training compares the two."""
    if curve.size and np.any(curve[-1] != 0) and np.allclose(100 * curve[-1], final, rtol=1e-5, equal_nan=True):
        return 100 * curve
    return curve


def _missing(name, metric, asked, records, final_record) -> str:
    if asked is None:
        return f"{name}: no {metric} yet, left out"
    offered = sorted({n for r in records[-50:] + [final_record or {}] for n in names_in(r)})
    raise UserError(f"run {name} has no metric {metric!r}; its records offer: {', '.join(offered) or 'nothing'}")


def _label(flat: dict[str, Any], group: dict[str, Any] | None, group_by: list[str] | None, name: str) -> str:
    """The method a run belongs to: the ``--group-by`` config keys, else the sweep cell's group,
    else the aggregator (the FL strategy, the prompt method)."""
    if group_by:
        missing = [k for k in group_by if k not in flat and k not in (group or {})]
        if missing:
            raise UserError(
                f"--group-by {','.join(missing)}: not a key of run {name}'s config.yaml "
                f"(dotted keys such as aggregator.name, run.seed)"
            )
        chosen = {k: flat.get(k, (group or {}).get(k)) for k in group_by}
    elif group:
        chosen = group
    else:
        key = next((k for k in ("aggregator.name", "strategy.name", "method", "problem", "name") if k in flat), None)
        return str(flat[key]) if key else name
    # an empty mapping (``aggregator.options: {}`` of the methods without options) names nothing
    chosen = {k: v for k, v in chosen.items() if v != {}} or chosen
    return ", ".join(_label_part(k, v, len(chosen) == 1) for k, v in chosen.items())


def _label_part(key: str, value: Any, alone: bool) -> str:
    """``aggregator.name: cagrad`` -> ``cagrad``; ``aggregator.options: {c: 0.5}`` -> ``c=0.5``;
    ``agent.lr: 0.001`` -> ``lr=0.001`` (a lone key: its value only)."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in flatten(value).items()) or f"{key.rsplit('.', 1)[-1]}={{}}"
    if alone or key == "base" or key.endswith(".name") or key == "name":
        return str(value)
    return f"{key.rsplit('.', 1)[-1]}={value}"


def _seed(flat: dict[str, Any], seed: int | None) -> int | None:
    if seed is not None:
        return int(seed)
    key = next((k for k in ("seed", "run.seed", "train.seed") if isinstance(flat.get(k), int)), None)
    return flat[key] if key else None


def _final_step(final_record, steps: list[int], info: dict[str, Any]) -> int | None:
    for key in ("step", "epoch", "round", "steps", "iterations"):
        value = (final_record or {}).get(key)
        if isinstance(value, (int, float)) and float(value).is_integer():  # the shell writes floats
            return int(value)
    if steps:
        return steps[-1]
    return info.get("position")


def _front(final: dict[str, Any]) -> dict[str, Any]:
    """The final front: morl's ``eval/discounted_return/<objective>`` maps (one entry per
    preference), or MORL-Baselines' unnamed ``eval/discounted_points`` rows."""
    prefix = "eval/discounted_return/"
    named = {k[len(prefix) :]: v for k, v in final.items() if k.startswith(prefix) and isinstance(v, dict)}
    if named:
        columns = [list(v.values()) for v in named.values()]
        return {"front": np.array(columns, dtype=float).T, "objectives": list(named)}
    points = final.get("eval/discounted_points")
    if isinstance(points, list) and points:
        return {"front": np.array(points, dtype=float)}
    return {}


def _series(records: list[dict[str, Any]]) -> dict[str, Series]:
    """Weights: the first weight key the run logs (one column per task); conflicts: every
    conflict statistic it logs (one column each)."""
    out = {}
    for plot, keys in SERIES.items():
        present = [k for k in keys if any(k in r for r in records)]
        cols: dict[str, dict[int, float]] = {}
        for record in records:
            for key in present[:1] if plot == "weights" else present:
                for col, v in _numbers(key, record.get(key)).items():
                    cols.setdefault(col, {})[int(record["step"])] = v
        if cols:
            steps = sorted({s for c in cols.values() for s in c})
            values = np.array([[c.get(s, np.nan) for c in cols.values()] for s in steps])
            out[plot] = Series(np.asarray(steps), values, list(cols))
    return out


def _numbers(key: str, value: Any) -> dict[str, float]:
    if isinstance(value, dict):
        return {t: float(v) for t, v in value.items() if t != "mean" and isinstance(v, (int, float))}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {key: float(value)}
    return {}


def collect(
    paths: list[str | Path], metric: str | None = None, group_by: list[str] | None = None
) -> tuple[list[Run], Path | None, list[str]]:
    """``(runs, sweep directory or None, notes)``; a UserError when no run has data."""
    sources, sweep, notes = find_sources(paths)
    runs = []
    for source in sources:
        got = read_run(source, metric, group_by, sweep)
        if isinstance(got, str):
            notes.append(got)
        else:
            runs.append(got)
    if not runs:
        where = str(sweep) if sweep else ", ".join(str(p) for p in paths)
        raise UserError(f"no run with data found in {where}" + (f" ({notes[0]})" if notes else ""))
    return runs, sweep, notes


def tidy(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per (run, task, evaluation point), plus the final value with ``point='final'``."""
    rows = []
    for run in runs:
        base = {"run": run.name, "kind": run.kind, "method": run.label, "seed": run.seed, "metric": run.metric.name}
        for step, values in zip(run.steps.tolist(), run.curve):
            rows.extend(
                {**base, "task": t, "step": step, "point": "eval", "value": float(v)} for t, v in zip(run.tasks, values)
            )
        rows.extend(
            {**base, "task": t, "step": run.final_step, "point": "final", "value": float(v)}
            for t, v in zip(run.tasks, run.final)
        )
    return rows
