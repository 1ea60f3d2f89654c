"""What an FL config builds: the clients' data, the server strategy, the local-training settings
and the federation of m global models (``morl.agents.federated``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from morl.runners.errors import UserError

if TYPE_CHECKING:
    from morl.runners.fl.config import FLConfig


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
    curriculum = (
        CurriculumSchedule(mc.curriculum_direction, decay=mc.curriculum_decay, topk_ratio=mc.topk_ratio)
        if mc.curriculum
        else None
    )
    most = MosT(
        s.num_models, tau=mc.tau, solver=mc.solver, gamma_scale=mc.gamma_scale, update=mc.update, curriculum=curriculum
    )
    return S.MosTStrategy(
        most,
        warmup_rounds=mc.warmup_rounds,
        combine=mc.combine,
        sample_fraction=mc.sample_fraction,
        gamma_momentum=mc.gamma_momentum,
        gamma_average=mc.gamma_average,
        gamma_average_start=mc.gamma_average_start,
        ot_resolve=mc.ot_resolve,
        seed=cfg.train.seed,
    )


def build_data(cfg: FLConfig):
    from morl.envs.data import federated as fl_data

    d = cfg.data
    try:
        if d.kind == "synthetic":
            return fl_data.synthetic(
                d.rho1, d.rho2, d.num_clients, samples_per_client=d.samples_per_client, iid=d.iid, seed=d.seed
            )
        return fl_data.digits(d.num_clients, d.dirichlet_alpha, seed=d.seed)
    except ValueError as exc:
        raise UserError(f"data: {exc}") from None


def local_config(cfg: FLConfig):
    """The clients' local SGD (FedProx's proximal weight only for fedprox; MosT's loss source only for most)."""
    from morl.agents.federated.simulator import LocalConfig

    t = cfg.train
    prox = cfg.strategy.prox_mu if cfg.strategy.name == "fedprox" else 0.0
    source = cfg.strategy.most.loss_source if cfg.strategy.name == "most" else "start"
    return LocalConfig(t.lr, t.local_steps, t.batch_size, prox, t.lr_decay, t.decay_every, source)


def build_federation(cfg: FLConfig, device):
    """The federation (data, model, strategy, m initial models) on ``device``."""
    from morl.agents.federated.model import build as build_model
    from morl.agents.federated.simulator import Federation

    data = build_data(cfg)
    model = build_model(cfg.model.kind, data.dim, data.num_classes, cfg.model.hidden)
    strategy = build_strategy(cfg, data.num_clients)
    return Federation(model, data, strategy, cfg.strategy.num_models, seed=cfg.train.seed, device=device)
