"""The RL config: four sections (env, agent, aggregator, run), each a dataclass.

``load_rl_config(path, overrides)`` reads YAML + ``key.sub=value`` overrides and then checks
everything that can be checked without building anything: the environment name and
protocol, the aggregator and its options (``morl.aggregators.build``), the device and the
step counters. A bad value fails with one line naming the key and what is allowed, before
any run directory exists. Every key is documented in docs/configs.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from morl.agents.rl.mtsac import MTSACConfig
from morl.envs.choices import Protocol, RewardFunctionVersion, RewardNormalization
from morl.runners.config import to_dict
from morl.runners.errors import UserError
from morl.runners.rl.run_section import RunSection, load_train_config, validate_run


@dataclass
class EnvConfig:
    """Arguments of ``envs.make_env`` (see docs/environments.md)."""

    name: str = "mt10"
    protocol: Protocol = "mtrl"
    max_episode_steps: int | None = None
    num_tasks: int | None = None
    envs_per_task: int = 1
    reward_function_version: RewardFunctionVersion = "v2"  # Meta-World's reward; v1: mtrl/CAGrad's MT10 runs
    reward_normalization: RewardNormalization = "none"  # exponential: mtrl's wrapper


def env_kwargs(env: EnvConfig) -> dict[str, Any]:
    """The keyword arguments of ``morl.envs.make_env`` this section sets (all but the name and seed)."""
    return {
        "protocol": env.protocol,
        "max_episode_steps": env.max_episode_steps,
        "num_tasks": env.num_tasks,
        "envs_per_task": env.envs_per_task,
        "reward_function_version": env.reward_function_version,
        "reward_normalization": env.reward_normalization,
    }


@dataclass
class AggregatorConfig:
    """``morl.aggregators.build(name, **options)``; it combines the per-task actor gradients."""

    name: str = "mean"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunConfig(RunSection):
    """Loop lengths and bookkeeping (``RunSection``) and multi-task SAC's own two keys.

    On MT10 a step is 10 transitions: mtrl's "2M steps" are 2M such iterations, i.e. 20M
    transitions.
    """

    warmup_catch_up: bool = (
        False  # mtrl: the first learning step makes up the warm-up's updates (runners/rl/schedule.py)
    )
    eval_episodes: int | None = None


@dataclass
class RLConfig:
    """The whole ``morl train`` config."""

    env: EnvConfig = field(default_factory=EnvConfig)
    agent: MTSACConfig = field(default_factory=MTSACConfig)
    aggregator: AggregatorConfig = field(default_factory=AggregatorConfig)
    run: RunConfig = field(default_factory=RunConfig)


def load_rl_config(path: str | Path | None, overrides: list[str] | None = None) -> RLConfig:
    """Load and fully validate an RL config; raises ``UserError`` with one line on bad input."""
    return load_train_config(RLConfig, path, overrides, "run", validate)


def config_from_dict(data: dict[str, Any]) -> RLConfig:
    """Rebuild a config saved in a run directory (``config.yaml``) or a checkpoint."""
    from morl.runners.config import from_dict

    cfg = from_dict(RLConfig, data)
    validate(cfg)
    return cfg


def validate(cfg: RLConfig) -> None:
    """Checks that need more than types: names, ranges, the aggregator's options."""
    _validate_env(cfg.env)
    _validate_aggregator(cfg.aggregator)
    validate_run(cfg.run, {"eval_episodes": ">=1?"})
    _validate_agent(cfg.agent, cfg.env)
    from morl.runners.device import resolve_device

    resolve_device(cfg.run.device)


def _validate_env(env: EnvConfig) -> None:
    import morl.envs as envs

    valid = envs.available_envs()
    if env.name.startswith("mt1:"):
        from morl.envs.metaworld_env import mt1_task_names

        if env.name[4:] not in mt1_task_names():
            raise UserError(
                f"env.name: unknown Meta-World task {env.name[4:]!r}; allowed after 'mt1:': {', '.join(mt1_task_names())}"
            )
    elif env.name not in valid:
        raise UserError(f"env.name: unknown environment {env.name!r}; allowed: {', '.join(valid)}")
    if env.name in envs.mo_env_names():
        scalar = [n for n in valid if n not in envs.mo_env_names()]
        raise UserError(
            f"env.name: {env.name!r} has a reward vector, and multi-task SAC learns from one reward per task; "
            f"allowed here: {', '.join(scalar)} (MO-SAC trains on {env.name}: an mo config, e.g. configs/mo/quickstart.yaml)"
        )
    if env.envs_per_task < 1:
        raise UserError(f"env.envs_per_task: must be >= 1, got {env.envs_per_task}")
    if env.max_episode_steps is not None and env.max_episode_steps < 1:
        raise UserError(f"env.max_episode_steps: must be >= 1 or null, got {env.max_episode_steps}")
    if env.num_tasks is not None and env.num_tasks < 1:
        raise UserError(f"env.num_tasks: must be >= 1 or null, got {env.num_tasks}")
    if env.reward_function_version != "v2" and env.name == "point_mass":
        raise UserError(
            "env.reward_function_version: point_mass has one reward; v1 exists for Meta-World (mt10, mt50, mt1:<task>) only"
        )


def _validate_aggregator(agg: AggregatorConfig) -> None:
    import morl.aggregators as aggregators

    if agg.name not in aggregators.available():
        raise UserError(
            f"aggregator.name: unknown aggregator {agg.name!r}; allowed: {', '.join(aggregators.available())}"
        )
    try:
        aggregators.build(agg.name, **agg.options)
    except (ValueError, TypeError) as exc:
        raise UserError(f"aggregator.options: {str(exc).splitlines()[0]}") from None


def _validate_agent(agent: MTSACConfig, env: EnvConfig) -> None:
    # The per-task minimums (batch_size, buffer_capacity >= tasks) are checked once the env is built.
    try:
        agent.validate(1)
    except ValueError as exc:
        raise UserError(str(exc).splitlines()[0]) from None


def config_dict(cfg: RLConfig) -> dict[str, Any]:
    """Plain nested dict (what config.yaml holds)."""
    return to_dict(cfg)
