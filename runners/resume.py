"""``morl resume RUN_DIR [key=value ...]``: continue a run of any kind from ``checkpoints/last.pt``.

The kind (rl, mo, supervised, forum, fl, prompt) is read from the run's ``run.json``; only the keys
that do not change the learner may be overridden (the error names them).
"""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", help="a run directory written by `morl train|supervised|forum|fl|prompt`")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="change settings that do not alter the learner, e.g. run.total_steps=3000000 (RL) or epochs=60 (supervised)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def main(args) -> int:
    from morl.runners.shell.commands import resume

    resume(args.run_dir, args.overrides, progress=False if args.no_progress else None)
    return 0
