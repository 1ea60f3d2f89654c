"""The environments' choice lists, defined once: configs type their keys with these Literals and
the environments validate against the same tuples."""

from __future__ import annotations

from typing import Literal, get_args

Protocol = Literal["mtrl", "metaworld_v3"]  # fixed goals / 150 steps (mtrl) or Meta-World 3's own
RewardFunctionVersion = Literal["v1", "v2"]  # Meta-World's per-task reward functions
RewardNormalization = Literal["none", "exponential", "running"]  # exponential: mtrl's wrapper; running: Welford

PROTOCOLS: tuple[str, ...] = get_args(Protocol)
REWARD_FUNCTION_VERSIONS: tuple[str, ...] = get_args(RewardFunctionVersion)
NORMALIZATION_CHOICES: tuple[str, ...] = get_args(RewardNormalization)
