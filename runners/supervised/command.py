"""``morl supervised CONFIG [key=value ...]``: train a supervised multi-task model from a YAML config
(``morl supervised --resume RUN_DIR`` = ``morl resume RUN_DIR``)."""

from __future__ import annotations


def add_arguments(parser) -> None:
    from morl.runners.shell.commands import add_start_arguments

    add_start_arguments(parser, "configs/supervised_digits_mgda.yaml", "seed=1 epochs=10 aggregator.name=pcgrad")


def main(args) -> int:
    from morl.runners.shell.commands import start_command

    return start_command("supervised", args)
