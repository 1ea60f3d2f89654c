"""Config of ``morl forum``: one dataclass tree, loaded by ``morl.runners.config.load_config``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class SolverConfig:
    """FORUM's own hyperparameters (Algorithm 1)."""

    rho: float = 0.5  # ρ of the dynamic barrier φ_k = (ρ/2)‖∇q̃‖²
    inner_steps: int = 16  # T lower-level SGD steps per iteration
    inner_lr: float = 0.3  # η
    beta_power: float = 0.75  # β_k = (k+1)^(−beta_power)
    beta_per_epoch: bool = False  # mtl: index β by the epoch as the official code does
    normalize_upper: bool = False  # unit-normalise each ∇F_i (official MTL code)
    warm_start: bool = True  # ω̃^0 = ω_k (else ω_0)


@dataclass
class HyperCleaningConfig:
    datasets: int = 2  # m digit shards, shard i rotated by i·90°
    noise: float = 0.5  # fraction of corrupted training labels
    hidden: list[int] = field(default_factory=lambda: [128, 64])
    alpha_lr: float = 10.0  # SGD lr on the sample-weight logits
    omega_lr: float = 0.3  # SGD lr on the model
    alpha_init: float = 0.0  # initial logit (σ = 0.5)
    batch_size: int | None = None  # None = full batches
    baselines: bool = True  # also train plain models on the noisy labels (with and without val-1)


@dataclass
class MTLDataConfig:
    name: Literal["digits", "digits_pair", "regression", "mnist1d", "file"] = "digits"
    options: dict[str, Any] = field(default_factory=dict)  # passed to morl.envs.data.supervised.load_dataset


@dataclass
class MTLConfig:
    data: MTLDataConfig = field(default_factory=MTLDataConfig)
    hidden: list[int] = field(default_factory=lambda: [64, 64])
    batch_size: int = 32  # per level: one training batch (LL) and one upper batch (UL) per iteration
    alpha_lr: float = 1e-3  # Adam lr on the loss-weight logits
    lr: float = 1e-3  # Adam lr on the model
    weight_decay: float = 0.0
    upper_split: Literal["val", "train"] = "val"  # paper: validation; official code: a 2nd training batch
    baseline: bool = True  # also train with equal loss weights through the same adapter


@dataclass
class ForumRunConfig:
    name: str = "forum"
    problem: Literal["hypercleaning", "mtl"] = "hypercleaning"
    seed: int = 0
    device: str = "cpu"
    iterations: int = 1200  # K upper-level iterations
    eval_every: int = 100  # log the FORUM diagnostics and evaluate every N iterations (and at the end)
    checkpoint_every: int = 100  # write checkpoints/last.pt every N iterations (and at the end)
    checkpoint_minutes: float | None = 15.0  # also once this much wall-clock time passed; null: by count only
    out_dir: str = "runs"
    forum: SolverConfig = field(default_factory=SolverConfig)
    hypercleaning: HyperCleaningConfig = field(default_factory=HyperCleaningConfig)
    mtl: MTLConfig = field(default_factory=MTLConfig)
