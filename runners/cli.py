"""The ``morl`` command. Each subcommand lives in its own module, imported only when used.

A subcommand module provides ``add_arguments(parser)`` and ``main(args) -> int``; it keeps
heavy imports (metaworld, flwr, transformers) inside ``main`` so ``morl --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from morl.runners.errors import UserError

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": ("morl.runners.train", "train a multi-task or multi-objective RL agent from a YAML config"),
    "eval": ("morl.runners.evaluate", "evaluate the latest checkpoint of a run directory"),
    "resume": ("morl.runners.resume", "continue a run from its last checkpoint"),
    "supervised": ("morl.runners.supervised.command", "train a supervised multi-task model from a YAML config"),
    "fl": ("morl.runners.fl.command", "run federated learning (FedAvg, FedProx, FedMGDA+, MosT)"),
    "prompt": ("morl.runners.prompt.command", "train a mixture of soft prompts with MosT"),
    "forum": (
        "morl.runners.forum.command",
        "FORUM multi-objective bi-level optimisation (hyper-cleaning, loss weights)",
    ),
    "sb3": ("morl.runners.sb3", "train the stable-baselines3 adapter with SB3's learn() and print evaluations"),
    "bench": ("morl.runners.bench.command", "run a benchmark (aggregators, rl, most, envs)"),
    "sweep": (
        "morl.runners.sweep.command",
        "run a grid of configs and seeds on a local process pool or on Ray, resumable",
    ),
    "report": (
        "morl.runners.report.command",
        "compare methods over runs and seeds: tables with confidence intervals, plots",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="morl", description="Multi-objective and multi-task learning with PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    from morl.runners.run_dir import release_run_dirs

    parser = build_parser()
    args = _parse(parser, argv)
    failed = False  # a failed start leaves no half-created run directory behind
    try:
        code = int(importlib.import_module(args._module).main(args) or 0)
        failed = code == 2
        return code
    except UserError as exc:
        failed = True
        return _error(str(exc))
    except OSError as exc:  # a path the user gave: a file where a folder should be, read-only, disk full
        failed = True
        where = f" {exc.filename!r}" if exc.filename else ""
        return _error(
            f"cannot read or write{where}: {exc.strerror or exc}; check the path, its permissions and free disk space"
        )
    except RuntimeError as exc:
        if "Error(s) in loading state_dict" not in str(exc):
            raise
        failed = True
        first = str(exc).splitlines()[1].strip() if len(str(exc).splitlines()) > 1 else str(exc)
        return _error(
            f"the checkpoint does not fit the networks of the run's config (was config.yaml edited?): {first}"
        )
    except KeyboardInterrupt as exc:
        print(f"morl: interrupted{': ' + str(exc) if str(exc) else ''}", file=sys.stderr)
        return 130
    finally:
        release_run_dirs(failed=failed)


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    # argparse fills `key=value ...` only from the positionals right after the config, so
    # `morl train cfg.yaml --run-dir d seed=1` would reject `seed=1`; overrides may come anywhere
    args, extra = parser.parse_known_args(argv)
    overrides = [a for a in extra if "=" in a and not a.startswith("-")]
    if extra and (overrides != extra or getattr(args, "overrides", None) is None):
        parser.parse_args(argv)  # argparse's own message and exit 2 for what no command accepts
    if overrides:
        args.overrides = [*args.overrides, *overrides]
    return args


def _error(message: str) -> int:
    print(f"morl: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
