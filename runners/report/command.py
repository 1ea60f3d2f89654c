"""``morl report SWEEP_DIR | RUN_DIR... [--out DIR] [--group-by K] [--metric M] [--baseline GROUP] [--reps N] [--seed S] [--no-plots]``

Writes ``report.md``, ``report.csv``, ``report.json``, ``records.csv`` (every score read, one row
per run, task and evaluation point) and ``plots/*.png|svg`` into ``--out`` (default
``<sweep dir>/report``, or ``./report`` for run directories), and prints the main table.
Everything is read and computed before anything is written: bad input writes nothing.
"""

from __future__ import annotations

import importlib.util
import shlex
from collections import Counter
from pathlib import Path

from morl.runners.errors import UserError

REPS_RANGE = (100, 1_000_000)


def add_arguments(parser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="SWEEP_DIR | RUN_DIR",
        help="a sweep directory (with manifest.json) or one or more run directories",
    )
    parser.add_argument("--out", metavar="DIR", help="output folder (default: <sweep dir>/report, or ./report)")
    parser.add_argument(
        "--group-by",
        metavar="KEY[,KEY]",
        help="dotted config keys whose values name a method, e.g. aggregator.name,agent.multi_head "
        "(default: the sweep's group, else aggregator.name)",
    )
    parser.add_argument(
        "--metric",
        metavar="M",
        help="the score to compare (default per kind: rl eval/success, mo eval/hv, "
        "supervised test/accuracy, forum test/accuracy, fl test_mean, prompt test/routed_acc)",
    )
    parser.add_argument("--reps", type=int, default=2000, metavar="N", help="bootstrap resamples (default 2000)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the bootstrap (default 0)")
    parser.add_argument("--no-plots", action="store_true", help="tables only")
    parser.add_argument(
        "--baseline",
        metavar="GROUP",
        help="also give each method's Δm%% against this method "
        "(e.g. mean), each run against the baseline's run of the same seed",
    )


def main(args) -> int:
    from .collect import collect, tidy
    from .summary import group, summarise
    from .tables import main_table, markdown

    if not REPS_RANGE[0] <= args.reps <= REPS_RANGE[1]:
        raise UserError(f"--reps {args.reps}: give between {REPS_RANGE[0]} and {REPS_RANGE[1]} bootstrap resamples")
    if not args.no_plots and importlib.util.find_spec("matplotlib") is None:
        raise UserError("the plots need matplotlib: pip install 'morl[cli]', or give --no-plots for the tables alone")
    group_by = [k.strip() for k in args.group_by.split(",") if k.strip()] if args.group_by else None
    runs, sweep, notes = collect(args.paths, args.metric, group_by)
    methods = group(runs)
    out = Path(args.out) if args.out else (sweep / "report" if sweep else Path("report"))
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {str(out)!r} is a file; give a folder")
    summary = summarise(methods, args.reps, args.seed)
    notes = notes + run_notes(methods)
    if args.baseline:
        from .delta_m import summarise_delta

        summary["delta_m"], delta_notes = summarise_delta(methods, args.baseline, args.reps, args.seed)
        notes += delta_notes
    drawn = []
    if not args.no_plots:
        from .plots import draw_all

        drawn, plot_notes = draw_all(methods, out / "plots", args.reps, args.seed)
        notes += plot_notes
    source = f"sweep {sweep}" if sweep else f"{len(runs)} run directories"
    _write(out, summary, notes, tidy(runs), markdown(summary, notes, source, drawn, _command(args)))
    print(main_table(summary))
    if "delta_m" in summary:
        from .tables import delta_table

        print(delta_table(summary))
    for note in notes:
        print(f"note: {note}")
    print(
        f"morl report: {out}/report.md (.csv, .json)"
        + (f", {len(drawn)} plot{'s' if len(drawn) > 1 else ''} in {out}/plots" if drawn else "")
    )
    return 0


def run_notes(methods) -> list[str]:
    """What a reader must know to trust the intervals: unfinished runs, a single run, runs that
    end at different points, the same seed twice."""
    notes = []
    for m in methods:
        status = Counter(r.status for r in m.runs if r.status not in (None, "finished"))
        if status:
            what = ", ".join(f"{n} {s}" for s, n in status.items())
            notes.append(f"{m.label}: {what} of {len(m.runs)} runs; their final score is their last evaluation so far")
        if len(m.runs) == 1:
            notes.append(f"{m.label}: one run, so its intervals have zero width (the bootstrap resamples runs)")
        ends = sorted({r.final_step for r in m.runs if r.final_step is not None})
        if len(ends) > 1:
            notes.append(f"{m.label}: runs end at different points ({', '.join(map(str, ends))})")
        seeds = [r.seed for r in m.runs if r.seed is not None]
        twice = sorted({s for s in seeds if seeds.count(s) > 1})
        if twice:
            notes.append(f"{m.label}: seed {', '.join(map(str, twice))} appears in more than one run")
    return notes


def _command(args) -> str:
    parts = ["morl", "report", *args.paths]
    for flag, value in (
        ("--out", args.out),
        ("--group-by", args.group_by),
        ("--metric", args.metric),
        ("--baseline", getattr(args, "baseline", None)),
    ):
        if value:
            parts += [flag, value]
    if args.reps != 2000:
        parts += ["--reps", str(args.reps)]
    if args.seed:
        parts += ["--seed", str(args.seed)]
    if args.no_plots:
        parts.append("--no-plots")
    return shlex.join(parts)


def _write(out: Path, summary, notes, records, report_md: str) -> None:
    import csv
    import io

    from morl.runners.checkpoint import atomic_write_text

    from .tables import to_csv, to_json

    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf,
        fieldnames=["run", "kind", "method", "seed", "metric", "task", "step", "point", "value"],
        lineterminator="\n",
    )
    writer.writeheader()
    writer.writerows(records)
    atomic_write_text(out / "records.csv", buf.getvalue())
    atomic_write_text(out / "report.csv", to_csv(summary))
    atomic_write_text(out / "report.json", to_json(summary, notes))
    atomic_write_text(out / "report.md", report_md)
