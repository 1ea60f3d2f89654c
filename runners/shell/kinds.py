"""The kinds of run, defined once: name -> "module:Class" implementing it (morl/registry.py).

``morl resume`` and ``morl eval`` read the kind from ``run.json``; run directories written
before run.json existed are recognised by the top-level config keys only their kind has.
"""

from __future__ import annotations

from pathlib import Path

from morl.runners.errors import UserError

KINDS: dict[str, str] = {
    "rl": "morl.runners.rl.experiment:RLExperiment",
    "mo": "morl.runners.mo.experiment:MOExperiment",
    "supervised": "morl.runners.supervised.experiment:SupervisedExperiment",
    "forum": "morl.runners.forum.experiment:ForumExperiment",
    "fl": "morl.runners.fl.experiment:FLExperiment",
    "prompt": "morl.runners.prompt.experiment:PromptExperiment",
}

# Before run.json: (keys only this kind's config has, kind); anything else is RL.
_KIND_KEYS = (
    (("prompts", "dispatcher"), "prompt"),
    (("strategy", "engine"), "fl"),
    (("data", "epochs"), "supervised"),
    (("problem", "forum"), "forum"),
)


def experiment_class(kind: str):
    from morl import registry

    try:
        return registry.resolve(KINDS, kind, "kind of run")
    except ValueError as exc:
        raise UserError(str(exc)) from None


def kind_of(run_dir: str | Path) -> str:
    """The kind of an existing run directory (run.json, else inferred from config.yaml)."""
    from morl.runners.config import read_yaml
    from morl.runners.run_dir import CONFIG_FILE
    from morl.runners.shell.run_info import read_run_info

    info = read_run_info(run_dir)
    if info is not None and info.get("kind") in KINDS:
        return info["kind"]
    return kind_of_config(read_yaml(Path(run_dir) / CONFIG_FILE))


def kind_of_config(data: dict) -> str:
    """The kind a config belongs to, from the top-level keys only that kind has (else RL); a
    config with a ``front`` section or an MO-Gymnasium env (``mo-*``) is multi-objective RL."""
    env = data.get("env")
    if "front" in data or (isinstance(env, dict) and str(env.get("name", "")).startswith("mo-")):
        return "mo"
    return next((kind for keys, kind in _KIND_KEYS if all(k in data for k in keys)), "rl")
