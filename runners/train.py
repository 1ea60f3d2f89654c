"""``morl train CONFIG [key=value ...]``: train MT-SAC with a gradient aggregator from a YAML config."""

from __future__ import annotations


def add_arguments(parser) -> None:
    from morl.runners.shell.commands import add_start_arguments

    add_start_arguments(parser, "configs/mt10_cagrad.yaml", "run.seed=1 aggregator.name=mgda aggregator.options={}")


def main(args) -> int:
    from morl.runners.shell.commands import start_command

    return start_command("rl", args)
