"""``morl train CONFIG [key=value ...]``: train MT-SAC with a gradient aggregator from a YAML config,
or, for a multi-objective config (a ``front`` section, an ``mo-*`` env), MO-SAC's population."""

from __future__ import annotations


def add_arguments(parser) -> None:
    from morl.runners.shell.commands import add_start_arguments

    add_start_arguments(parser, "configs/mt10_cagrad.yaml", "run.seed=1 aggregator.name=mgda aggregator.options={}")


def main(args) -> int:
    from morl.runners.shell.commands import start_command

    return start_command(train_kind(args), args)


def train_kind(args) -> str:
    """``mo`` for a multi-objective config or run directory, else ``rl``."""
    from morl.runners.config import read_yaml
    from morl.runners.run_dir import existing_run_dir
    from morl.runners.shell.kinds import kind_of, kind_of_config

    if args.resume:
        return "mo" if kind_of(existing_run_dir(args.resume)) == "mo" else "rl"
    if args.config is None:
        return "rl"
    return "mo" if kind_of_config(read_yaml(args.config)) == "mo" else "rl"
