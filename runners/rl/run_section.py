"""The ``run:`` section of both SAC kinds (``morl train`` on a multi-task or an ``mo`` config).

``RunSection`` holds the loop lengths and bookkeeping each kind's run section starts from (a
kind adds its own keys and may set other default lengths); ``load_train_config`` loads either
kind's config, names the run after the file and checks the section's ranges with the kind's own
checks. Every key is documented in docs/configs.md (an ``mo`` config's lengths: docs/mosac.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from morl.runners.config import load_config, require

# The section's ranges (``morl.runners.config.require``); a kind's own keys are checked after these.
RULES = {
    "total_steps": ">=1",
    "updates_per_step": ">=1",
    "eval_every": ">=1",
    "log_every": ">=1",
    "checkpoint_every": ">=1",
    "keep_checkpoints": ">=1",
    "max_nonfinite_updates": ">=1",
    "checkpoint_minutes": ">0?",
    "warmup_steps": ">=0",
}


@dataclass
class RunSection:
    """Loop lengths and bookkeeping; the lengths are multi-task SAC's defaults.

    A *step* is one iteration of the vector environment: every sub-env steps once, followed by
    ``updates_per_step`` gradient updates.
    """

    total_steps: int = 2_000_000
    seed: int = 0
    device: str = "auto"
    warmup_steps: int = 1500
    updates_per_step: int = 1
    eval_every: int = 10_000
    log_every: int = 1000
    checkpoint_every: int = 10_000
    checkpoint_minutes: float | None = 15.0  # also every 15 min of wall-clock time: a crash never loses more
    keep_checkpoints: int = 3
    out_dir: str = "runs"
    name: str | None = None
    max_nonfinite_updates: int = 100


def validate_run(run: RunSection, own_rules: dict[str, str] | None = None) -> None:
    """The section's ranges, then the kind's ``own_rules`` for its own keys: one ``UserError`` line."""
    require(run, {**RULES, **(own_rules or {})}, prefix="run.")


def load_train_config(
    config_class: type, path: str | Path | None, overrides: list[str] | None, default_name: str, validate: Callable
) -> Any:
    """Load ``config_class`` from ``path`` + ``overrides``, name the run after the file (``default_name``
    without one) and check it with ``validate``; raises ``UserError`` with one line on bad input."""
    cfg = load_config(config_class, path, overrides)
    if cfg.run.name is None:
        cfg.run.name = Path(path).stem if path is not None else default_name
    validate(cfg)
    return cfg
