"""Config of ``morl supervised``: one dataclass tree, loaded by ``morl.runners.config.load_config``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class DataConfig:
    name: Literal["digits", "digits_pair", "regression", "mnist1d", "file"] = "digits"
    options: dict[str, Any] = field(default_factory=dict)  # passed to morl.envs.data.supervised.load_dataset


@dataclass
class ModelConfig:
    hidden: list[int] = field(default_factory=lambda: [64, 64])  # trunk widths (shared), then one linear head per task


@dataclass
class AggregatorConfig:
    name: str = "mean"  # any of morl.aggregators.available()
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class OrderingConfig:
    name: str = (
        "random"  # any of morl.ordering.available(): random, flipflop, random_flipflop, grab, grab_separate, jogba
    )
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimConfig:
    name: Literal["adam", "sgd"] = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.0  # sgd only


@dataclass
class SupervisedConfig:
    name: str = "supervised"
    seed: int = 0
    device: str = "cpu"
    epochs: int = 30
    batch_size: int = 32
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    aggregator: AggregatorConfig = field(default_factory=AggregatorConfig)
    ordering: OrderingConfig = field(default_factory=OrderingConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    task_weights: list[float] | None = None
    # what the aggregator combines: params (the [K, D] shared-parameter gradients) or features (MGDA-UB's
    # gradients w.r.t. the trunk output, back-propagated once; docs/gradients.md)
    grad_wrt: Literal["params", "features"] = "params"
    max_grad_norm: float | None = None
    eval_every: int = 1  # epochs
    checkpoint_every: int = 5  # epochs (the last epoch is always checkpointed)
    checkpoint_minutes: float | None = (
        15.0  # also checkpoint once this much wall-clock time passed; null: by epochs only
    )
    max_nonfinite_updates: int = 100  # this many NaN/inf (skipped) updates in a row stop the run (exit 3)
    out_dir: str = "runs"
    baseline_run: str | None = None  # a finished run dir whose test metrics are the Δm baseline
    baseline_metrics: dict[str, float] | None = None  # or the baseline given directly: {"<task>/<metric>": value}
