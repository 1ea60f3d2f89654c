"""``morl fl CONFIG [key=value ...]`` / ``morl fl --resume RUN_DIR``: federated learning with m
models, clients as objectives.

Writes ``<out_dir>/<name>-<time>/`` with ``config.yaml``, TensorBoard events (``tb/``),
``metrics.jsonl`` (one line per evaluation), ``checkpoints/last.pt`` (every
``train.checkpoint_every`` rounds and at the end, atomically) and ``summary.json`` (val-picked
test accuracy: mean and worst 20/40/60/80 %, at the last round and at the round with the best
mean validation accuracy). ``--resume`` continues from the checkpoint: models, strategy state
(plan, Γ average, cached stale deltas, switch average, curriculum), round counter, evaluation
history and the torch RNG; every round's randomness is a function of (seed, round), so a
resumed run ends exactly where the uninterrupted one does.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
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


RESUME_KEYS = ("train.rounds", "train.eval_every", "train.checkpoint_every", "engine.num_cpus", "engine.cpus_per_client")


def add_arguments(parser) -> None:
    parser.add_argument("config", nargs="?", help="YAML config (see configs/fl_*.yaml)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.rounds=20 strategy.name=most")
    parser.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help=f"continue RUN_DIR from its last checkpoint (overrides may only change {', '.join(RESUME_KEYS)})")


def validate(cfg: FLConfig) -> None:
    t, s, d = cfg.train, cfg.strategy, cfg.data
    checks = [
        (t.rounds >= 1, f"train.rounds must be >= 1, got {t.rounds}"),
        (t.lr > 0, f"train.lr must be > 0, got {t.lr}"),
        (0 < t.lr_decay <= 1, f"train.lr_decay must be in (0, 1], got {t.lr_decay}"),
        (t.local_steps >= 1 and t.batch_size >= 1, "train.local_steps and train.batch_size must be >= 1"),
        (t.eval_every >= 1, f"train.eval_every must be >= 1, got {t.eval_every}"),
        (t.checkpoint_every >= 1, f"train.checkpoint_every must be >= 1, got {t.checkpoint_every}"),
        (s.num_models >= 1, f"strategy.num_models must be >= 1, got {s.num_models}"),
        (s.prox_mu >= 0, f"strategy.prox_mu must be >= 0, got {s.prox_mu}"),
        (d.num_clients >= 1, f"data.num_clients must be >= 1, got {d.num_clients}"),
    ]
    for ok, msg in checks:
        if not ok:
            raise UserError(msg)
    try:  # the strategy's own checks (MosT's options), so they are written once
        build_strategy(cfg, d.num_clients)
    except ValueError as exc:
        raise UserError(f"strategy{'.most' if s.name == 'most' else ''}: {exc}") from None


def build_strategy(cfg: FLConfig, num_clients: int):
    from morl.agents.federated import strategies as S
    from morl.most import CurriculumSchedule, MosT

    s = cfg.strategy
    if s.name in ("fedavg", "fedprox"):
        return S.FedAvg() if s.name == "fedavg" else S.FedProx()
    if s.name == "fedmgda":
        return S.FedMGDA(s.fedmgda_eps)
    if s.name == "mgda":
        return S.MGDA()
    if s.name == "linearization":
        return S.Linearization(s.num_models, num_clients, cfg.train.seed)
    if s.name in ("krum", "trimmed_mean"):
        return S.Robust(s.name, s.n_byzantine, num_clients)
    mc = s.most
    curriculum = CurriculumSchedule(mc.curriculum_direction, decay=mc.curriculum_decay, topk_ratio=mc.topk_ratio) if mc.curriculum else None
    most = MosT(s.num_models, tau=mc.tau, solver=mc.solver, gamma_scale=mc.gamma_scale, update=mc.update, curriculum=curriculum)
    return S.MosTStrategy(most, warmup_rounds=mc.warmup_rounds, combine=mc.combine, sample_fraction=mc.sample_fraction,
                          gamma_momentum=mc.gamma_momentum, gamma_average=mc.gamma_average,
                          gamma_average_start=mc.gamma_average_start, ot_resolve=mc.ot_resolve, seed=cfg.train.seed)


def build_data(cfg: FLConfig):
    from morl.envs.data import federated as fl_data

    d = cfg.data
    try:
        if d.kind == "synthetic":
            return fl_data.synthetic(d.rho1, d.rho2, d.num_clients, samples_per_client=d.samples_per_client, iid=d.iid, seed=d.seed)
        return fl_data.digits(d.num_clients, d.dirichlet_alpha, seed=d.seed)
    except ValueError as exc:
        raise UserError(f"data: {exc}") from None


def run(cfg: FLConfig, run_dir=None, log=print, resume: bool = False) -> dict:
    """Train per ``cfg``; with ``run_dir`` write logs/checkpoints there. Returns the summary.

    ``resume=True`` continues ``run_dir`` from ``checkpoints/last.pt``.
    """
    import torch

    from morl.agents.federated.model import build as build_model
    from morl.agents.federated.simulator import Federation, InProcessEngine, LocalConfig
    from morl.runners.checkpoint import atomic_torch_save, atomic_write_text, torch_load
    from morl.runners.device import resolve_device
    from morl.runners.run_dir import CHECKPOINT_DIR, LAST_CHECKPOINT, drop_records_after, last_checkpoint

    validate(cfg)
    device = resolve_device(cfg.device)
    data = build_data(cfg)
    model = build_model(cfg.model.kind, data.dim, data.num_classes, cfg.model.hidden)
    strategy = build_strategy(cfg, data.num_clients)
    t = cfg.train
    prox = cfg.strategy.prox_mu if cfg.strategy.name == "fedprox" else 0.0
    source = cfg.strategy.most.loss_source if cfg.strategy.name == "most" else "start"
    local = LocalConfig(t.lr, t.local_steps, t.batch_size, prox, t.lr_decay, t.decay_every, source)
    engine_device = device if cfg.engine.name == "inprocess" else torch.device("cpu")
    fed = Federation(model, data, strategy, cfg.strategy.num_models, seed=t.seed, device=engine_device)
    history: list[dict] = []
    if resume:
        state = torch_load(last_checkpoint(run_dir), map_location=engine_device)
        fed.load_state_dict(state["federation"])
        history = list(state["history"])
        fed.seconds = dict(state["seconds"])
        torch.set_rng_state(state["torch_rng"].cpu())
        drop_records_after(run_dir / "metrics.jsonl", fed.round)
        log(f"resuming {run_dir} at round {fed.round}")
    logger = None
    if run_dir is not None:
        from morl.runners.tensorboard import RunLogger, flatten_config

        logger = RunLogger(run_dir, purge_step=fed.round + 1 if resume else None)
        if not resume:
            logger.hparams(flatten_config(asdict(cfg)))

    def checkpoint() -> None:
        state = {"federation": fed.state_dict(), "history": history, "seconds": dict(fed.seconds),
                 "torch_rng": torch.get_rng_state(), "round": fed.round, "config": asdict(cfg)}
        atomic_torch_save(state, run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT)

    def on_round(r: int) -> None:
        if r % t.eval_every == 0 or r == t.rounds:
            _evaluate(fed, r, history, logger, log)
        if run_dir is not None and (r % t.checkpoint_every == 0 or r == t.rounds):
            logger.flush()
            checkpoint()

    try:
        if cfg.engine.name == "inprocess":
            engine = InProcessEngine(model, fed.data, local, t.seed)
            while fed.round < t.rounds:
                fed.run_round(engine)
                on_round(fed.round)
        elif fed.round < t.rounds:
            try:
                from morl.agents.federated import flower_engine
            except ImportError as exc:
                raise UserError(f"engine.name=flower needs Flower: pip install 'morl[fl]' ({exc})") from None
            flower_engine.run(fed, local, t.seed, t.rounds, on_round, cfg.engine.num_cpus, cfg.engine.cpus_per_client)
        if not history or history[-1]["round"] != fed.round:
            _evaluate(fed, fed.round, history, logger, log)  # resumed past the configured end
        best = max(history, key=lambda h: h["val_mean"])
        summary = {"final": history[-1], "best_val": best, "seconds": dict(fed.seconds), "rounds": fed.round}
        if run_dir is not None:
            atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2))
    finally:
        if logger is not None:
            logger.close()
    return summary


def _evaluate(fed, r: int, history: list, logger, log) -> None:
    ev = fed.evaluate()
    row = {k: float(ev[k]) for k in ("test_mean", "test_worst20", "test_worst40", "test_worst60", "test_worst80", "oracle_test_mean")}
    row["val_mean"] = float(ev["val_acc"].max(0).values.mean())
    row["train_loss"] = float(ev["train_loss"].min(0).values.mean())
    row["model_share"] = ev["model_share"].tolist()
    history.append({"round": r, **row})
    log(f"round {r:4d}  test mean {row['test_mean']:.4f}  worst20 {row['test_worst20']:.4f}  val {row['val_mean']:.4f}")
    if logger is not None:
        for k, v in row.items():
            if k != "model_share":
                logger.scalar(f"fl/{k}", v, r)
        logger.record(r, **row)


def load(args):
    """``(cfg, run_dir or None)``: the config of a new run or of the run to resume, validated."""
    from morl.runners.run_dir import config_or_resume

    cfg, run_dir = config_or_resume(FLConfig, args, RESUME_KEYS, "fl")
    validate(cfg)
    from morl.runners.device import resolve_device

    resolve_device(cfg.device)
    build_data(cfg)  # fail on bad data options before creating the run directory
    return cfg, run_dir


def main(args) -> int:
    from morl.runners.config import save_config
    from morl.runners.run_dir import CONFIG_FILE, new_run_dir

    if not hasattr(args, "resume"):
        args.resume = None
    cfg, run_dir = load(args)
    resume = run_dir is not None
    if not resume:
        run_dir = new_run_dir(cfg.out_dir, cfg.name)
    save_config(cfg, run_dir / CONFIG_FILE)
    summary = run(cfg, run_dir, resume=resume)
    f = summary["final"]
    print(f"morl fl: {cfg.strategy.name} on {cfg.data.kind}: test mean {f['test_mean']:.4f}, worst20 {f['test_worst20']:.4f} -> {run_dir}")
    return 0
