"""``morl prompt CONFIG [key=value ...]``: a mixture of soft prompts trained with MosT or a baseline
(the run itself: ``runners/prompt/experiment.py``; ``morl resume`` / ``morl eval`` continue and
evaluate it)."""

from __future__ import annotations


def add_arguments(parser) -> None:
    from morl.runners.shell.commands import add_start_arguments

    add_start_arguments(parser, "configs/prompt_most.yaml", "seed=1 steps=100")


def main(args) -> int:
    from morl.runners.shell.commands import start_command

    return start_command("prompt", args)
