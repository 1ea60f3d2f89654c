"""``morl sweep SPEC.yaml [--engine local|ray] [--address ADDR] [--max-parallel N] [--dry-run]``."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from morl.runners.errors import UserError
from morl.runners.hints import command

ENGINES = ("local", "ray")


def add_arguments(parser) -> None:
    parser.add_argument(
        "spec", help="sweep spec, e.g. configs/sweeps/point_mass_aggregators.yaml (keys: docs/sweeps.md)"
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="local: a process pool on this machine (default); ray: Ray tasks, on a cluster with --address",
    )
    parser.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="Ray cluster to join (`auto`: the one `ray start --head` started here); default: a local Ray instance",
    )
    parser.add_argument(
        "--max-parallel", type=int, default=None, metavar="N", help="at most N runs at a time (default: as many as fit)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the cells and what each needs next; run and write nothing"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar (one line per event instead)")


def main(args) -> int:
    from morl.runners.sweep.cells import expand
    from morl.runners.sweep.manifest import check_manifest, claim_sweep, release_sweep, sweep_dir, write_manifest
    from morl.runners.sweep.spec import load_spec

    if args.address is not None and args.engine != "ray":
        raise UserError("--address is for --engine ray; add --engine ray or leave out --address")
    if args.max_parallel is not None and args.max_parallel < 1:
        raise UserError(f"--max-parallel must be at least 1, got {args.max_parallel}")
    spec = load_spec(args.spec)
    cells = expand(spec)
    check_configs(cells)
    folder = sweep_dir(spec)
    check_manifest(folder, cells)
    if args.dry_run:
        print_cells(folder, cells)
        return 0
    engine = make_engine(args.engine, args.address, spec)  # a cluster that cannot be reached: nothing written yet
    try:
        claim_sweep(folder)  # before the manifest: a second driver must not rewrite it
        write_manifest(folder, spec, cells)
        return run(folder, spec, cells, engine, args)
    finally:
        engine.close()
        release_sweep(folder)


def run(folder, spec, cells, engine, args) -> int:
    from morl.runners.sweep.scheduler import Scheduler

    print(
        f"morl sweep: {folder}: {len(cells)} cells on {engine.name} "
        f"({min(engine.capacity, args.max_parallel or engine.capacity, len(cells))} at a time)",
        flush=True,
    )
    scheduler = Scheduler(
        folder,
        cells,
        engine,
        max_retries=spec.max_retries,
        threads=spec.resources.cpus,
        gpus=spec.resources.gpus,
        max_parallel=args.max_parallel,
        progress=False if args.no_progress else None,
    )
    code = scheduler.run()
    for line in scheduler.status.summary():
        print(line, file=sys.stderr if code else sys.stdout)
    if code == 130:
        print(f"morl sweep: interrupted; continue with: {command('morl')} sweep {args.spec}", file=sys.stderr)
    print(f"morl sweep: sweep directory {folder} (status.json, logs/)", flush=True)
    return code


def make_engine(name: str, address: str | None, spec):
    if name == "ray":
        from morl.runners.sweep.ray_engine import RayEngine

        return RayEngine(address, spec.resources.cpus, spec.resources.gpus)
    from morl.runners.sweep.local_engine import LocalEngine

    return LocalEngine(spec.resources.cpus)


def check_configs(cells) -> None:
    """Load every cell's config with its overrides: a bad key or value stops the sweep with one
    line before anything is written or run (it would fail every attempt of its cell)."""
    from morl.runners.shell.kinds import experiment_class
    from morl.runners.sweep.kinds import kind_of_cell

    for cell in cells:
        try:
            experiment_class(kind_of_cell(cell.command, cell.config)).load_config(cell.config, list(cell.overrides))
        except UserError as exc:
            raise UserError(f"cell {cell.name}: {exc}") from None


def print_cells(folder, cells) -> None:
    from morl.runners.sweep.run_state import next_action

    print(f"morl sweep: {folder}: {len(cells)} cells (dry run: nothing written or run)")
    width = max(len(c.name) for c in cells)
    for cell in cells:
        action = next_action(folder / cell.run_dir)
        print(
            f"  {cell.name:<{width}}  {action:<8}  morl {shlex.join([cell.command, _short(cell.config), *cell.overrides])}"
        )


def _short(path: str) -> str:
    """A config path relative to the current directory when it lies below it (shorter lines)."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path
