"""``morl resume RUN_DIR [key=value ...]``: continue a run of any kind from ``checkpoints/last.pt``.

The kind (rl, supervised, forum, fl, prompt) is read from the run's ``run.json``; only the keys
that do not change the learner may be overridden (the error names them).
"""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", help="a run directory written by `morl train|supervised|forum|fl|prompt`")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value",
        help="change settings that do not alter the learner, e.g. run.total_steps=3000000 (RL) or epochs=60 (supervised)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


# Kinds whose runner is not on the shell yet resume through their own command (being ported).
_NOT_YET_ON_THE_SHELL: dict[str, str] = {}


def main(args) -> int:
    import argparse
    import importlib
    import importlib.util

    from morl.runners.run_dir import existing_run_dir
    from morl.runners.shell.commands import resume
    from morl.runners.shell.kinds import KINDS, kind_of

    kind = kind_of(existing_run_dir(args.run_dir))
    if kind in _NOT_YET_ON_THE_SHELL and importlib.util.find_spec(KINDS[kind].split(":")[0]) is None:
        runner = importlib.import_module(_NOT_YET_ON_THE_SHELL[kind])
        return runner.main(argparse.Namespace(config=None, overrides=args.overrides, resume=args.run_dir))
    resume(args.run_dir, args.overrides, progress=False if args.no_progress else None)
    return 0
