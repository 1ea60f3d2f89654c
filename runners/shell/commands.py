"""Start, resume and evaluate a run of any kind: the code behind ``morl train|supervised|forum|fl|
prompt``, ``morl resume`` and ``morl eval``.

Order matters for "nothing written on bad input": the config is validated and the whole
experiment (environments, data, networks, aggregator) is built BEFORE the run directory is
created, so any error leaves no trace on disk.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from morl.runners.errors import UserError


def add_start_arguments(parser, example: str, overrides: str) -> None:
    """The arguments every starting subcommand takes; ``example`` is a config of the kind and
    ``overrides`` valid overrides of it (tests/runners/test_help_examples.py loads them)."""
    parser.add_argument("config", nargs="?", help=f"YAML config, e.g. {example} (keys: docs/configs.md)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help=f"nested overrides, e.g. {overrides}")
    parser.add_argument(
        "--run-dir",
        default=None,
        metavar="DIR",
        help="write the run into exactly this new directory (default: <out_dir>/<name>-<timestamp>)",
    )
    parser.add_argument(
        "--resume", metavar="RUN_DIR", default=None, help="same as `morl resume RUN_DIR [key=value ...]`"
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="hide the progress bar (shown only on a terminal anyway)"
    )


def start_command(kind: str, args) -> int:
    """``morl <command> CONFIG [k=v ...] [--run-dir DIR]`` (or ``--resume RUN_DIR``)."""
    from morl.runners.shell.kinds import experiment_class

    progress = False if args.no_progress else None
    if args.resume:
        overrides = ([args.config] if args.config else []) + list(args.overrides)
        resume(args.resume, overrides, progress=progress, expected_kind=kind)
        return 0
    if args.config is None:
        cls = experiment_class(kind)
        raise UserError(f"give a config file (morl {cls.command} CONFIG [key=value ...]) or --resume RUN_DIR")
    start(
        kind,
        experiment_class(kind).load_config(args.config, list(args.overrides)),
        run_dir=args.run_dir,
        progress=progress,
    )
    return 0


def start(
    kind: str, cfg: Any, *, run_dir: str | Path | None = None, progress: bool | None = None, stop_at: int | None = None
) -> Path:
    """Build the experiment, create its run directory, run it to the end; returns the run directory."""
    from morl.runners.config import save_config
    from morl.runners.run_dir import CONFIG_FILE, named_run_dir, new_run_dir
    from morl.runners.shell.kinds import experiment_class
    from morl.runners.shell.loop import run

    exp = experiment_class(kind)(cfg)
    path = named_run_dir(run_dir) if run_dir is not None else new_run_dir(exp.out_dir, exp.name)
    save_config(cfg, path / CONFIG_FILE)
    print(f"morl: run directory {path}", flush=True)
    final = run(exp, path, progress=progress, stop_at=stop_at)
    _print_end(exp, path, final)
    return path


def _load_resumable(run_dir: Path, overrides: list[str], expected_kind: str | None):
    from morl.runners.checkpoint import torch_load
    from morl.runners.hints import command
    from morl.runners.run_dir import CONFIG_FILE, check_config_unchanged, claim_run_dir, last_checkpoint
    from morl.runners.shell.checkpoints import check_checkpoint
    from morl.runners.shell.kinds import experiment_class, kind_of

    kind = kind_of(run_dir)
    if expected_kind is not None and kind != expected_kind:
        raise UserError(f"{run_dir} is a {kind!r} run; continue it with: {command('morl')} resume {run_dir}")
    cls = experiment_class(kind)
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key not in cls.resume_keys:
            raise UserError(
                f"override {key!r} cannot change a started {kind} run; allowed: {', '.join(cls.resume_keys)}"
            )
    cfg = cls.load_config(run_dir / CONFIG_FILE, overrides)
    claim_run_dir(run_dir)
    path = last_checkpoint(run_dir)
    exp = cls(cfg)
    state = check_checkpoint(torch_load(path, map_location=exp.map_location), exp, path)
    check_config_unchanged(run_dir, exp.config_dict(), overrides, stored=state.get("config"))
    exp.load_state_dict(state)
    return exp, cfg


def resume(
    run_dir: str | Path,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    progress: bool | None = None,
    stop_at: int | None = None,
    expected_kind: str | None = None,
) -> Path:
    """``morl resume``: restore ``checkpoints/last.pt`` and continue to the end of the schedule."""
    from morl.runners.config import save_config
    from morl.runners.run_dir import CONFIG_FILE, drop_records_after, existing_run_dir
    from morl.runners.shell.loop import FINAL_METRICS, run

    run_dir = existing_run_dir(run_dir)
    overrides = list(overrides)
    exp, cfg = _load_resumable(run_dir, overrides, expected_kind)
    total = exp.schedule.total
    if exp.position >= total and (run_dir / FINAL_METRICS).is_file():
        print(
            f"morl: run already finished ({exp.position}/{total} {exp.unit}s); raise its length to continue "
            f"(allowed overrides: {', '.join(exp.resume_keys)})"
        )
        exp.close()
        return run_dir
    if overrides:
        save_config(cfg, run_dir / CONFIG_FILE)
    drop_records_after(run_dir / "metrics.jsonl", exp.position)
    print(f"morl: resuming {run_dir} at {exp.unit} {exp.position}/{total}", flush=True)
    final = run(exp, run_dir, progress=progress, resumed=True, stop_at=stop_at)
    _print_end(exp, run_dir, final)
    return run_dir


def evaluate(
    run_dir: str | Path,
    checkpoint: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    **options: Any,
) -> dict[str, Any]:
    """``morl eval``: load a checkpoint (default ``last.pt``), evaluate, print and write the result."""
    from morl.runners.checkpoint import atomic_write_text, torch_load
    from morl.runners.run_dir import CONFIG_FILE, existing_run_dir, last_checkpoint
    from morl.runners.shell.checkpoints import check_checkpoint
    from morl.runners.shell.kinds import experiment_class, kind_of
    from morl.runners.shell.loop import _json_safe
    from morl.runners.shell.metrics import resolve

    run_dir = existing_run_dir(run_dir)
    cls = experiment_class(kind_of(run_dir))
    path = Path(checkpoint) if checkpoint else last_checkpoint(run_dir)
    if not path.is_file():
        raise UserError(f"checkpoint {str(path)!r} does not exist")
    exp = cls(cls.load_config(run_dir / CONFIG_FILE, list(overrides)), for_evaluation=True)
    try:
        state = check_checkpoint(torch_load(path, map_location=exp.map_location), exp, path)
        exp.load_state_dict(state, for_evaluation=True)
        result = exp.evaluate(**options)
        result.pop("figures", None)  # TensorBoard images of a run in progress, not part of the printed result
        result = _json_safe(resolve(result))
    finally:
        exp.close()
    out = {"checkpoint": str(path), "kind": exp.kind, exp.unit: exp.position, **result}
    print(format_table(out, exp.unit))
    target = run_dir / "eval" / f"{exp.unit}_{exp.position:09d}.json"
    atomic_write_text(target, json.dumps(out, indent=2) + "\n")
    print(f"morl: wrote {target}")
    return out


def format_table(out: dict[str, Any], unit: str) -> str:
    """Per-name metrics (e.g. per-task success) as columns of one table, scalars below it."""
    tables = {k: v for k, v in out.items() if isinstance(v, dict)}
    lines = [f"evaluation of {out['checkpoint']} ({unit} {out[unit]})"]
    names = list(dict.fromkeys(n for v in tables.values() for n in v))
    if names:
        width = max(len(n) for n in names + ["name"])
        lines.append(f"{'name':<{width}}  " + "  ".join(f"{k:>14}" for k in tables))
        for n in names:
            cells = (tables[k].get(n) for k in tables)
            lines.append(
                f"{n:<{width}}  " + "  ".join(f"{c:14.4f}" if isinstance(c, float) else f"{'':>14}" for c in cells)
            )
    lines += [f"{k}: {v:.4f}" for k, v in out.items() if isinstance(v, float)]
    return "\n".join(lines)


def _print_end(exp, run_dir: Path, final: dict[str, Any]) -> None:
    from morl.runners.hints import command

    line = exp.summary(final)
    if line:
        print(f"morl: final: {line}")
    print(
        f"morl: run directory {run_dir}\n"
        f"morl: watch it:    {command('tensorboard')} --logdir {run_dir / 'tb'}\n"
        f"morl: evaluate it: {command('morl')} eval {run_dir}",
        file=sys.stdout,
        flush=True,
    )
