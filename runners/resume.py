"""``morl resume RUN_DIR [run.key=value ...]``: continue a run from ``checkpoints/last.pt``."""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", help="a run directory written by `morl train`")
    parser.add_argument(
        "overrides", nargs="*", metavar="run.key=value",
        help="change run settings that do not alter the learner, e.g. run.total_steps=3000000 run.device=cuda",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def main(args) -> int:
    from runners.rl_runs import resume_run

    resume_run(args.run_dir, args.overrides, progress=False if args.no_progress else None)
    return 0
