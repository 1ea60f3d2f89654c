"""Federated learning (``morl fl``) as an experiment of the shell: m global models trained by a
server strategy (FedAvg, FedProx, FedMGDA+, MGDA, linearisation, Krum, trimmed mean, MosT) over
clients that are the objectives.

``step()`` is one server round, in process (one vmapped call over clients x models) or through
Flower (``runners/fl/flower_rounds.py`` runs Flower's server loop in a thread and hands it one
round per step). Every round's randomness is a function of (seed, round), so the state between
two rounds is the models, the strategy's state (plan, Γ average, cached stale deltas, switch
average, curriculum), the evaluation history and the timers; the RNG states are saved as well.
The headline is ``test_mean``: the mean over clients of the test accuracy of the model each
client picks on its validation split (MosT: Li et al., ICLR 2025,
arXiv:2403.04099, §6.2).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from morl.runners.divergence import Diverged
from morl.runners.fl.config import FLConfig, validate
from morl.runners.shell.experiment import Experiment, Schedule

CHECKPOINT_FORMAT = 1
EVAL_KEYS = ("test_mean", "test_worst20", "test_worst40", "test_worst60", "test_worst80", "oracle_test_mean")


class FLExperiment(Experiment):
    kind = "fl"
    command = "fl"
    unit = "round"
    resume_keys = (
        "train.rounds",
        "train.eval_every",
        "train.checkpoint_every",
        "train.checkpoint_minutes",
        "engine.num_cpus",
        "engine.cpus_per_client",
        "device",
    )
    device_key = "device"
    config_class = FLConfig
    checkpoint_format = CHECKPOINT_FORMAT

    def __init__(self, cfg: FLConfig, *, for_evaluation: bool = False) -> None:
        from morl.runners.device import resolve_device
        from morl.runners.fl.build import build_federation, local_config

        self.cfg = cfg
        device = resolve_device(cfg.device)
        # Flower's ClientApps train on the CPU; the server then keeps its models there too.
        self.device = device if cfg.engine.name == "inprocess" or for_evaluation else torch.device("cpu")
        self.map_location = self.device
        self.fed = build_federation(cfg, self.device)
        self.local = local_config(cfg)
        self.history: list[dict[str, Any]] = []
        if not for_evaluation:
            _seed_global_rngs(cfg.train.seed)
        self.engine = None if for_evaluation else self._engine()
        self._logged = dict(self.fed.seconds)
        self.saved: int | None = None  # round of the checkpoint on disk

    def _engine(self):
        if self.cfg.engine.name == "inprocess":
            from morl.agents.federated.simulator import InProcessEngine

            return InProcessEngine(self.fed.model, self.fed.data, self.local, self.cfg.train.seed)
        from morl.runners.fl.flower_rounds import FlowerRounds

        e = self.cfg.engine
        return FlowerRounds(
            self.fed, self.local, self.cfg.train.seed, self.cfg.train.rounds, e.num_cpus, e.cpus_per_client
        )

    @classmethod
    def validate(cls, cfg: FLConfig) -> None:
        validate(cfg)

    @property
    def position(self) -> int:
        return self.fed.round

    @property
    def schedule(self) -> Schedule:
        t = self.cfg.train
        # One log line per evaluation: the rounds in between have nothing to report but timings.
        return Schedule(t.rounds, t.eval_every, t.eval_every, t.checkpoint_every, t.checkpoint_minutes)

    # ----- the work -----------------------------------------------------------------------
    def step(self) -> None:
        try:
            if self.cfg.engine.name == "inprocess":
                self.fed.run_round(self.engine)
            else:
                self.engine.next_round()
        except ValueError as exc:  # MosT's transport refuses NaN/inf losses before any model moves
            if "NaN/inf" not in str(exc):
                raise
            raise self._diverged(f"round {self.fed.round + 1}", str(exc)) from None

    def log_metrics(self) -> dict[str, Any]:
        """The learning rate of the next round and the seconds spent since the last log point."""
        spent = {k: v - self._logged.get(k, 0.0) for k, v in self.fed.seconds.items()}
        self._logged = dict(self.fed.seconds)
        return {"lr": self.local.lr_at(self.fed.round), **{f"perf/{k}_seconds": v for k, v in spent.items()}}

    def evaluate(self, **options: Any) -> dict[str, Any]:
        """Val-picked test accuracy (mean and worst 20/40/60/80 % of clients), the oracle's, the
        best validation accuracy, the lowest training loss and how many clients pick each model."""
        ev = self.fed.evaluate()
        row: dict[str, Any] = {k: float(ev[k]) for k in EVAL_KEYS}
        row["val_mean"] = float(ev["val_acc"].max(0).values.mean())
        row["train_loss"] = float(ev["train_loss"].min(0).values.mean())
        row["model_share"] = ev["model_share"].tolist()
        if self.engine is not None:  # a run in progress, not `morl eval` of a checkpoint
            self.history.append({"round": self.fed.round, **row})
        return {**row, "headline": row["test_mean"]}

    def summary(self, metrics: dict[str, Any]) -> str:
        """An evaluation's line, or the last evaluation's for the final metrics."""
        row = metrics.get("final", metrics)
        if "test_mean" not in row:
            return ""
        return f"test mean {row['test_mean']:.4f}  worst20 {row['test_worst20']:.4f}  val {row['val_mean']:.4f}"

    def watch(self) -> str | None:
        """Non-finite models stop the run before they replace the last good checkpoint."""
        if bool(torch.isfinite(self.fed.thetas).all()):
            return None
        raise self._diverged(f"round {self.fed.round}", "a global model has non-finite (NaN/inf) parameters")

    def divergence_advice(self) -> str:
        from morl.runners.divergence import advice

        return advice("train.lr", None)

    def _diverged(self, at: str, what: str) -> Diverged:
        from morl.runners.run_dir import CHECKPOINT_DIR, LAST_CHECKPOINT

        checkpoint = Path(self.run_dir or ".") / CHECKPOINT_DIR / LAST_CHECKPOINT
        where = (
            "no checkpoint was written before it"
            if self.saved is None
            else f"last good checkpoint {checkpoint} (round {self.saved})"
        )
        return Diverged(
            f"training diverged at {at}/{self.cfg.train.rounds}: {what}; {where}; {self.divergence_advice()}"
        )

    def final_metrics(self) -> dict[str, Any]:
        """The last evaluation, the one with the best mean validation accuracy, timers and rounds."""
        best = max(self.history, key=lambda h: h["val_mean"])
        last = self.history[-1]
        return {
            "final": last,
            "best_val": best,
            "seconds": dict(self.fed.seconds),
            "rounds": self.fed.round,
            "headline": last["test_mean"],
        }

    # ----- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self.saved = self.fed.round  # the shell calls this to write the checkpoint
        return {
            "format": CHECKPOINT_FORMAT,
            "config": self.config_dict(),
            "round": self.fed.round,
            "federation": self.fed.state_dict(),
            "history": list(self.history),
            "seconds": dict(self.fed.seconds),
            "logged_seconds": dict(self._logged),
            "rng": _rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any], *, for_evaluation: bool = False) -> None:
        self.fed.load_state_dict(state["federation"])
        self.saved = self.fed.round
        if for_evaluation:
            return
        self.history = list(state["history"])
        self.fed.seconds = dict(state["seconds"])
        self._logged = dict(state["logged_seconds"])
        _set_rng_state(state["rng"])

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


def _seed_global_rngs(seed: int) -> None:
    # Rounds draw from generators seeded by (seed, round); the global RNGs are seeded too, so that
    # anything a strategy might draw from them repeats from the config alone.
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def _rng_state() -> dict[str, Any]:
    # Saved so that nothing drawn from the global RNGs can tell a resumed run from a straight one.
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
