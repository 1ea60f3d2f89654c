"""What a sweep needs to know about each kind of run, defined once: the ``morl`` subcommand that
starts it and the config key its seed goes to."""

from __future__ import annotations

from pathlib import Path

from morl.runners.errors import UserError

COMMAND_KIND: dict[str, str] = {
    "train": "rl",
    "supervised": "supervised",
    "forum": "forum",
    "fl": "fl",
    "prompt": "prompt",
}
KIND_COMMAND: dict[str, str] = {**{kind: command for command, kind in COMMAND_KIND.items()}, "mo": "train"}

# RL keeps run settings in a `run` section; federated learning keeps them in `train` (its
# `data.seed` draws the clients' data, which a seed sweep should keep fixed).
SEED_KEY: dict[str, str] = {
    "rl": "run.seed",
    "mo": "run.seed",
    "supervised": "seed",
    "forum": "seed",
    "fl": "train.seed",
    "prompt": "seed",
}


def seed_key(command: str) -> str:
    return SEED_KEY[COMMAND_KIND[command]]  # `train`'s two kinds (rl, mo) keep it in the same place


def kind_of_cell(command: str, config: str | Path) -> str:
    """The kind a cell runs: its command's, where `train` runs multi-objective configs as ``mo``."""
    if command == "train":
        from morl.runners.config import read_yaml
        from morl.runners.shell.kinds import kind_of_config

        return "mo" if kind_of_config(read_yaml(config)) == "mo" else "rl"
    return COMMAND_KIND[command]


def command_of_config(path: str | Path) -> str:
    """The subcommand that runs a config file, from the top-level keys only its kind has."""
    from morl.runners.config import read_yaml
    from morl.runners.shell.kinds import kind_of_config

    data = read_yaml(path)
    kind = kind_of_config(data)
    return KIND_COMMAND[kind]


def check_command(command: object, where: str) -> str:
    if command not in COMMAND_KIND:
        raise UserError(f"{where}: command {command!r} is not allowed; allowed: {', '.join(COMMAND_KIND)}")
    return str(command)
