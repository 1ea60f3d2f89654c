"""``morl forum CONFIG [key=value ...]``: FORUM on data hyper-cleaning or multi-task loss weights
(``morl forum --resume RUN_DIR`` = ``morl resume RUN_DIR``)."""

from __future__ import annotations


def add_arguments(parser) -> None:
    from morl.runners.shell.commands import add_start_arguments

    add_start_arguments(parser, "configs/forum_hypercleaning_digits.yaml", "seed=1 iterations=100")


def main(args) -> int:
    from morl.runners.shell.commands import start_command

    return start_command("forum", args)
