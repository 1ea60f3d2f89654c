"""``morl resume RUN_DIR [key=value ...]``: continue a run from ``checkpoints/last.pt``.

Works for the RL runs of ``morl train``, the supervised runs of ``morl supervised``, the
federated runs of ``morl fl`` and the mixture-of-prompts runs of ``morl prompt``; the kind is
read from the run's own ``config.yaml``.
"""

from __future__ import annotations

import argparse


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", help="a run directory written by `morl train`, `morl supervised`, `morl fl` or `morl prompt`")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value",
        help="change settings that do not alter the learner, e.g. run.total_steps=3000000 run.device=cuda (RL) or epochs=60 (supervised)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


# A run's kind, recognised by top-level keys only its config has: (keys, runner module).
# RL runs (``morl train``) are everything else.
KINDS = (
    (("prompts", "dispatcher"), "morl.runners.prompt.run"),
    (("strategy", "engine"), "morl.runners.fl.run"),
    (("data", "epochs"), "morl.runners.supervised.run"),
)


def _runner_of(run_dir) -> str | None:
    from morl.runners.config import read_yaml
    from morl.runners.run_dir import CONFIG_FILE, existing_run_dir

    cfg = read_yaml(existing_run_dir(run_dir) / CONFIG_FILE)
    return next((module for keys, module in KINDS if all(k in cfg for k in keys)), None)


def main(args) -> int:
    module = _runner_of(args.run_dir)
    if module is not None:
        import importlib

        runner = importlib.import_module(module)
        return runner.main(argparse.Namespace(config=None, overrides=args.overrides, resume=args.run_dir))
    from morl.runners.rl.runs import resume_run

    resume_run(args.run_dir, args.overrides, progress=False if args.no_progress else None)
    return 0
