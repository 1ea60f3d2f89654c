"""The ``morl fl`` config (data, model, strategy, train, engine) and the checks its types cannot
make; every key is documented in docs/configs.md and docs/federated.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from morl.runners.errors import UserError


@dataclass
class DataConfig:
    kind: Literal["synthetic", "digits"] = "synthetic"
    rho1: float = 0.5  #: synthetic: std of the label-model prior (heterogeneity of W_k, b_k)
    rho2: float = 0.5  #: synthetic: std of the feature-mean prior (heterogeneity of x)
    iid: bool = False
    num_clients: int = 30
    samples_per_client: int | None = 100  #: synthetic; null = FedProx's lognormal(4, 2) + 50
    dirichlet_alpha: float = 0.5  #: digits: Dirichlet concentration of the label split
    seed: int = 0


@dataclass
class ModelConfig:
    kind: Literal["logreg", "mlp"] = "logreg"
    hidden: int = 64


@dataclass
class MostConfig:
    tau: float = 0.0
    solver: Literal["ipot", "sinkhorn"] = "ipot"
    gamma_scale: Literal["paper", "code"] = "code"
    update: Literal["paper", "code"] = "code"
    combine: Literal["mgda", "linear", "switch"] = "mgda"
    curriculum: bool = False
    curriculum_direction: Literal["paper", "code"] = "paper"
    curriculum_decay: float = 0.995
    topk_ratio: float = 0.1
    warmup_rounds: int = 3
    # The official code's round (tianyi-lab/MosT federated_moo.py + update.py; not in the paper);
    # the defaults are the plain round.
    sample_fraction: float = 1.0  #: fraction of (model, client) pairs trained per round; the rest stay stale
    loss_source: Literal["start", "last_epoch"] = "start"  #: OT cost: L_i(θ_j), or the last local epoch's mean loss
    gamma_momentum: float = 0.0  #: EMA Γ̄ ← μΓ̄ + (1−μ)Γ of the plans used by the MGDA step (0 = off)
    gamma_average: Literal["ema", "cumulative"] = "ema"  #: cumulative = the code's running mean (ot_ma)
    gamma_average_start: int = 0  #: plans before averaging starts (the code's sma_start_iter = 100)
    ot_resolve: int = 0  #: OT re-solves on predicted losses in the MGDA branch (the code's ot_iter = 1)


@dataclass
class StrategyConfig:
    name: Literal["fedavg", "fedprox", "fedmgda", "mgda", "linearization", "most", "krum", "trimmed_mean"] = "fedavg"
    num_models: int = 5
    prox_mu: float = 0.01  #: fedprox
    fedmgda_eps: float = 0.5  #: fedmgda
    n_byzantine: int = 0  #: krum (f) / trimmed_mean (trim): clients whose updates may be arbitrary
    most: MostConfig = field(default_factory=MostConfig)


@dataclass
class TrainConfig:
    rounds: int = 100
    lr: float = 0.05
    lr_decay: float = 0.995
    decay_every: int = 10
    local_steps: int = 12
    batch_size: int = 20
    eval_every: int = 10
    checkpoint_every: int = 10  #: rounds between checkpoints (and always at the end)
    checkpoint_minutes: float | None = None  #: also checkpoint after this much wall-clock time (null: by count only)
    seed: int = 0


@dataclass
class EngineConfig:
    name: Literal["inprocess", "flower"] = "inprocess"
    num_cpus: int | None = None  #: flower: CPUs Ray may use (default: all)
    cpus_per_client: float = 1.0  #: flower: CPUs reserved per ClientApp


@dataclass
class FLConfig:
    name: str = "fl"
    out_dir: str = "runs"
    device: str = "auto"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)


def validate(cfg: FLConfig) -> None:
    """One UserError line for the first bad value; then the strategy's own checks."""
    from morl.runners.config import require
    from morl.runners.device import resolve_device
    from morl.runners.fl.build import build_strategy

    require(
        cfg,
        {
            "train.rounds": ">=1",
            "train.lr": ">0",
            "train.lr_decay": "(0,1]",
            "train.local_steps": ">=1",
            "train.batch_size": ">=1",
            "train.eval_every": ">=1",
            "train.checkpoint_every": ">=1",
            "train.checkpoint_minutes": ">0?",
            "strategy.num_models": ">=1",
            "strategy.prox_mu": ">=0",
            "data.num_clients": ">=1",
            "engine.num_cpus": ">=1?",
            "engine.cpus_per_client": ">0",
        },
    )
    s, d = cfg.strategy, cfg.data
    resolve_device(cfg.device)
    try:  # the strategy's own checks (MosT's options), so they are written once
        build_strategy(cfg, d.num_clients)
    except ValueError as exc:
        raise UserError(f"strategy{'.most' if s.name == 'most' else ''}: {exc}") from None
