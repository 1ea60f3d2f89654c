"""The multi-objective RL config (``morl train`` on an ``mo`` config): five sections, each a dataclass.

``env`` (an MO-Gymnasium task), ``agent`` (MO-SAC, ``MOSACConfig``), ``aggregator`` (``linear`` or
a ``morl`` aggregator), ``front`` (how the population's front is evaluated and scored) and ``run``
(loop lengths). ``load_mo_config(path, overrides)`` checks everything that can be checked
without building the environment, with one line naming the bad key and what is allowed.
A config is of this kind when it has a ``front`` section or names an MO env (``mo-*``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from morl.agents.rl.mosac import LINEAR, MOSACConfig
from morl.runners.config import require, to_dict
from morl.runners.errors import UserError
from morl.runners.rl.run_section import RunSection, load_train_config, validate_run

EUM_SIZES = (10, 20, 50, 100)  # the shipped equally_spaced_weights sets


@dataclass
class MOEnvConfig:
    """Arguments of ``envs.make_env`` for an MO-Gymnasium task (docs/environments.md)."""

    name: str = "mo-halfcheetah-v5"
    max_episode_steps: int | None = None  # None: the task's own (1000)


@dataclass
class AggregatorConfig:
    """``linear`` (scalarisation by each policy's preference) or ``morl.aggregators.build(name, **options)``."""

    name: str = LINEAR
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class FrontConfig:
    """How a front is measured: each policy's mean vector return over ``episodes`` evaluation episodes."""

    episodes: int = 1  # per policy
    gamma: float = 0.99  # the discounted returns the hypervolume, EUM and sparsity score (MORL-Baselines')
    eum_weights: int = 50  # EUM over equally_spaced_weights(M, eum_weights): 10, 20, 50 or 100


@dataclass
class MORunConfig(RunSection):
    """``RunSection`` with MO-SAC's lengths; a *step* is one step of every sub-env (P transitions, one per policy)."""

    total_steps: int = 33_334
    warmup_steps: int = 200
    eval_every: int = 2_500
    log_every: int = 500
    checkpoint_every: int = 5_000


@dataclass
class MOConfig:
    """The whole config of a multi-objective run."""

    env: MOEnvConfig = field(default_factory=MOEnvConfig)
    agent: MOSACConfig = field(default_factory=MOSACConfig)
    aggregator: AggregatorConfig = field(default_factory=AggregatorConfig)
    front: FrontConfig = field(default_factory=FrontConfig)
    run: MORunConfig = field(default_factory=MORunConfig)


def load_mo_config(path: str | Path | None, overrides: list[str] | None = None) -> MOConfig:
    """Load and fully validate an ``mo`` config; raises ``UserError`` with one line on bad input."""
    return load_train_config(MOConfig, path, overrides, "mo", validate)


def validate(cfg: MOConfig) -> None:
    """Checks that need more than types: the env, ranges, the aggregator and its options."""
    from morl.runners.device import resolve_device

    reward_dim = _validate_env(cfg.env)
    validate_run(cfg.run)
    require(cfg.front, {"episodes": ">=1", "gamma": "[0,1]"}, prefix="front.")
    if cfg.front.eum_weights not in EUM_SIZES:
        raise UserError(
            f"front.eum_weights: {cfg.front.eum_weights} preferences are not shipped; allowed: {', '.join(map(str, EUM_SIZES))}"
        )
    _validate_agent(cfg, reward_dim)
    resolve_device(cfg.run.device)


def _validate_env(env: MOEnvConfig) -> int:
    """The env's number of objectives; an env without a reward vector is refused."""
    import morl.envs as envs
    from morl.envs.mo_gymnasium_env import MO_TASKS

    if env.name not in envs.mo_env_names():
        scalar = " has one reward per task" if env.name in envs.available_envs() or env.name.startswith("mt1:") else ""
        raise UserError(
            f"env.name: {env.name!r}{scalar or ' is not an environment'}; MO-SAC needs a reward vector, allowed: "
            f"{', '.join(envs.mo_env_names())} (multi-task RL on Meta-World or point_mass: a config without `front`)"
        )
    if env.max_episode_steps is not None and env.max_episode_steps < 1:
        raise UserError(f"env.max_episode_steps: must be >= 1 or null, got {env.max_episode_steps}")
    return len(MO_TASKS[env.name].objectives)


def _validate_agent(cfg: MOConfig, reward_dim: int) -> None:
    """The agent's fields, the preferences for this env and the aggregator against its M objectives."""
    from morl.agents.rl.conditioned_mosac import check_conditioned
    from morl.agents.rl.mosac import build_policy_aggregators, preference_matrix

    try:
        cfg.agent.validate()
        preferences = preference_matrix(cfg.agent, reward_dim)
        if cfg.agent.conditioned:
            check_conditioned(cfg.agent, reward_dim)
    except ValueError as exc:
        raise UserError(str(exc).splitlines()[0]) from None
    try:
        build_policy_aggregators(cfg.aggregator.name, cfg.aggregator.options, preferences)
    except (ValueError, TypeError) as exc:
        key = "aggregator.name" if "unknown aggregator" in str(exc) else "aggregator.options"
        raise UserError(f"{key}: {str(exc).splitlines()[0]}") from None


def config_dict(cfg: MOConfig) -> dict[str, Any]:
    """Plain nested dict (what config.yaml holds)."""
    return to_dict(cfg)
