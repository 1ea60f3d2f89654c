"""``morl fl CONFIG [key=value ...]``: federated learning with m models, clients as objectives
(the run itself: ``runners/fl/experiment.py``; ``morl resume`` / ``morl eval`` continue and
evaluate it)."""

from __future__ import annotations


def add_arguments(parser) -> None:
    from morl.runners.shell.commands import add_start_arguments

    add_start_arguments(parser, "configs/fl_synthetic_most.yaml", "train.seed=1 train.rounds=50")


def main(args) -> int:
    from morl.runners.shell.commands import start_command

    return start_command("fl", args)
