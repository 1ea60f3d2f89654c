"""Synthetic run and sweep directories for the `morl report` tests: the files a run of the
experiment shell leaves (config.yaml, run.json, metrics.jsonl, final_metrics.json), with
scores the tests know in advance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

TASKS = ["reach", "push", "pick", "door"]
STEPS = [100, 200, 300]


def success_table(seed: int, offset: float) -> np.ndarray:
    """[len(STEPS), len(TASKS)] success rates in quarters (4 evaluation episodes per task)."""
    rng = np.random.default_rng(seed)
    p = np.clip(offset + 0.25 * np.arange(len(STEPS))[:, None] + rng.normal(0, 0.2, (len(STEPS), len(TASKS))), 0, 1)
    return np.round(p * 4) / 4


def write_rl_run(
    path: Path,
    aggregator: str,
    seed: int,
    success: np.ndarray,
    *,
    run_json: bool = True,
    final_json: bool = True,
    status: str = "finished",
    weights: bool = True,
) -> Path:
    """An RL run dir: train records every 50 steps (weights, conflicts), eval records at STEPS."""
    path.mkdir(parents=True)
    cfg = {
        "env": {"name": "point_mass", "num_tasks": len(TASKS)},
        "agent": {"batch_size": 64},
        "aggregator": {"name": aggregator, "options": {}},
        "run": {"seed": seed, "total_steps": STEPS[-1]},
    }
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))
    if run_json:
        info = {"kind": "rl", "status": status, "position": STEPS[-1], "total": STEPS[-1], "unit": "step"}
        (path / "run.json").write_text(json.dumps(info))
    lines = []
    for step in range(50, STEPS[-1] + 1, 50):
        record = {
            "step": step,
            "time": 0.0,
            "kind": "train",
            "grad/cos_min": -0.5 + step / 1000,
            "grad/cos_mean": 0.1,
            "grad/conflicting_pairs": 2.0,
            "perf/transitions_per_s": 500.0,
        }
        if weights:
            record["aggregator/weight"] = {t: 1 / len(TASKS) for t in TASKS} | {"mean": 1 / len(TASKS)}
        lines.append(record)
        if step in STEPS:
            row = success[STEPS.index(step)]
            per_task = {t: float(v) for t, v in zip(TASKS, row)} | {"mean": float(row.mean())}
            lines.append(
                {"step": step, "time": 0.0, "kind": "eval", "eval/success": per_task, "headline": float(row.mean())}
            )
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    if final_json:
        last = {t: float(v) for t, v in zip(TASKS, success[-1])}
        (path / "final_metrics.json").write_text(json.dumps({"step": float(STEPS[-1]), "eval/success": last}))
    return path


def write_sweep(root: Path, methods: dict[str, float], seeds: list[int]) -> tuple[Path, dict[str, np.ndarray]]:
    """A sweep dir with a manifest; returns it and, per method, the [seeds, STEPS, TASKS] successes."""
    cells, tables = [], {}
    for m, (aggregator, offset) in enumerate(methods.items()):
        tables[aggregator] = np.stack([success_table(100 * m + s, offset) for s in seeds])
        for i, s in enumerate(seeds):
            name = f"{aggregator}-s{s}"
            write_rl_run(root / "runs" / name, aggregator, s, tables[aggregator][i])
            group = {
                "aggregator.name": aggregator,
                "run.total_steps": STEPS[-1],
            }  # the second key is the same everywhere
            cells.append({"name": name, "run_dir": f"runs/{name}", "group": group, "seed": s})
    (root / "manifest.json").write_text(json.dumps({"cells": cells}))
    return root, tables
