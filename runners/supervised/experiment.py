"""Supervised multi-task learning (``morl supervised``) as an experiment of the shell.

``step()`` is one epoch (``runners/supervised/training.py``). Every ``eval_every`` epochs the
validation and test metrics are logged; at the end the test metrics (last epoch) go to
``final_metrics.json`` with Δm% against a baseline run when one is configured. Steps that meet
a NaN/inf are undone and counted by the adapter; ``watch()`` reads the counters once per
epoch: skipped steps are reported, and ``max_nonfinite_updates`` in a row stop the run.

Headline: the mean over tasks of the test metric (accuracy for classification, MSE for
regression) of the Δm metric set.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from morl.runners.divergence import Diverged
from morl.runners.errors import UserError
from morl.runners.shell.experiment import Experiment, Schedule
from morl.runners.supervised.config import SupervisedConfig

FINAL_METRICS = "final_metrics.json"
CHECKPOINT_FORMAT = 1
EVAL_BATCH = 512


class SupervisedExperiment(Experiment):
    kind = "supervised"
    command = "supervised"
    unit = "epoch"
    resume_keys = ("epochs", "eval_every", "checkpoint_every", "checkpoint_minutes", "device")
    device_key = "device"
    config_class = SupervisedConfig
    checkpoint_format = CHECKPOINT_FORMAT

    @classmethod
    def validate(cls, cfg: SupervisedConfig) -> None:
        from morl.runners.config import require

        require(
            cfg,
            {
                "epochs": ">=1",
                "batch_size": ">=1",
                "eval_every": ">=1",
                "checkpoint_every": ">=1",
                "max_nonfinite_updates": ">=1",
                "checkpoint_minutes": ">0?",
                "optim.lr": ">0",
                "model.hidden": ">=1",
                "max_grad_norm": ">0?",
            },
        )
        if cfg.baseline_run and cfg.baseline_metrics:
            raise UserError("give either baseline_run or baseline_metrics, not both")

    def __init__(self, cfg: SupervisedConfig, *, for_evaluation: bool = False) -> None:
        from morl.runners.device import resolve_device
        from morl.runners.supervised.training import build, task_metrics

        self.cfg = cfg
        self.device = self.map_location = resolve_device(cfg.device)
        self.data, self.adapter, self.order = build(cfg, self.device)
        # Seeded after build: a first import of the data libraries draws from Python's generator.
        random.seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)
        self.directions = task_metrics(self.adapter)
        self.baseline = None if for_evaluation else self._baseline()
        self.x, self.y = (t.to(self.device) for t in self.data.train)
        self.epoch = 0
        self.train_loss: torch.Tensor | None = None
        self.reported = (0, 0)  # (skipped steps, steps) at the last read of the counters
        self.saved: tuple[int, int] | None = None  # (epoch, adapter steps) of the checkpoint on disk
        self.started = time.time()

    def _baseline(self) -> dict[str, float] | None:
        """The Δm baseline's test metrics, checked against this run's metric set."""
        cfg = self.cfg
        if cfg.baseline_run:
            path = Path(cfg.baseline_run) / FINAL_METRICS
            if not path.is_file():
                raise UserError(
                    f"baseline_run {cfg.baseline_run!r} has no {FINAL_METRICS} (is it a finished morl supervised run?)"
                )
            baseline = json.loads(path.read_text())["test"]
        elif cfg.baseline_metrics:
            baseline = dict(cfg.baseline_metrics)
        else:
            return None
        missing = [k for k in self.directions if k not in baseline]
        if missing:
            raise UserError(
                f"the Δm baseline lacks metric(s) {', '.join(missing)}; it must come from a run on the same tasks"
            )
        return baseline

    @property
    def position(self) -> int:
        return self.epoch

    @property
    def task_names(self) -> list[str]:
        return list(self.data.task_names)

    def layout_tags(self) -> dict[str, Any]:
        return {"weight_tag": "train/weights", "conflict_tags": (), "speed_tags": ()}

    @property
    def schedule(self) -> Schedule:
        cfg = self.cfg
        return Schedule(cfg.epochs, 1, cfg.eval_every, cfg.checkpoint_every, cfg.checkpoint_minutes)

    # ----- the work -----------------------------------------------------------------------
    def step(self) -> None:
        from morl.runners.supervised.training import train_epoch

        self.train_loss = train_epoch(self.adapter, self.order, self.x, self.y)
        self.epoch += 1

    def log_metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {"train/loss": self._per_task(self.train_loss, mean=True)}
        weights = getattr(self.adapter.aggregator, "weights", None)
        if isinstance(weights, torch.Tensor):
            out["train/weights"] = self._per_task(weights)
        out["train/skipped_nonfinite_updates"] = self.adapter.nonfinite_steps
        return out

    def _per_task(self, values: torch.Tensor, mean: bool = False) -> dict[str, Any]:
        values = values.detach().double().cpu()  # one read-back per epoch
        out = dict(zip(self.data.task_names, values.tolist()))
        if mean:
            out["mean"] = float(values.mean())
        return out

    def evaluate(self, **options: Any) -> dict[str, Any]:
        val = self.adapter.evaluate(self.data.batches("val", EVAL_BATCH))
        test = self.adapter.evaluate(self.data.batches("test", EVAL_BATCH))
        return {"val": val, "test": test, "headline": self._headline(test)}

    def _headline(self, test: dict[str, float]) -> float:
        return float(np.mean([test[k] for k in self.directions]))

    def summary(self, metrics: dict[str, Any]) -> str:
        if "delta_m" in metrics or "directions" in metrics:  # final_metrics.json
            line = "test " + "  ".join(f"{k}={v:.4f}" for k, v in metrics["test"].items() if k in self.directions)
            return line + (f"  Δm% vs baseline {metrics['delta_m']:+.3f}" if "delta_m" in metrics else "")
        if "val" not in metrics:
            return ""
        val, metric_names = metrics["val"], self.adapter.metric_names()
        return "val " + "  ".join(f"{n}={val[f'{n}/{m}']:.4f}" for n, m in zip(self.data.task_names, metric_names))

    def watch(self) -> str | None:
        """Report skipped steps since the last read; stop once too many came in a row, or when the
        latest step was skipped and the model's own outputs are non-finite (it cannot recover)."""
        from morl.runners.divergence import streak_text, warn_skipped

        a = self.adapter
        total, streak, longest = (
            int(v) for v in torch.stack([a.nonfinite_steps, a.nonfinite_streak, a.nonfinite_longest]).tolist()
        )
        line = warn_skipped(total, self.reported[0], a.steps - self.reported[1])
        self.reported = (total, a.steps)
        limit = self.cfg.max_nonfinite_updates
        if longest >= limit:
            raise self._diverged(
                streak_text(longest, "max_nonfinite_updates", limit, total, a.steps), streak, streak >= limit
            )
        bad = self._nonfinite_output() if streak > 0 else None  # a validation pass only after a skipped step
        if bad is not None:
            what = f"the model outputs NaN/inf (validation {bad}) and its last {streak} updates were skipped"
            raise self._diverged(what, streak, True)
        return None if line is None else f"epoch {self.epoch}: {line}"

    def _nonfinite_output(self) -> str | None:
        """The first validation metric that is NaN/inf (None: all finite)."""
        metrics = self.adapter.evaluate(self.data.batches("val", EVAL_BATCH))
        return next((f"{k}={v}" for k, v in metrics.items() if not np.isfinite(v)), None)

    def skipped_updates(self) -> tuple[int, int]:
        return int(self.adapter.nonfinite_steps), self.adapter.steps

    def divergence_advice(self) -> str:
        from morl.runners.divergence import advice

        return advice("optim.lr", "max_grad_norm" if self.cfg.max_grad_norm is None else None)

    def _diverged(self, what: str, streak: int, ongoing: bool) -> Diverged:
        """``ongoing``: the streak of skipped steps still runs (else the long one is over)."""
        from morl.runners.run_dir import CHECKPOINT_DIR, LAST_CHECKPOINT

        steps, saved = self.adapter.steps, self.saved
        checkpoint = Path(self.run_dir or ".") / CHECKPOINT_DIR / LAST_CHECKPOINT
        # good: the checkpoint holds none of the steps from the last one taken before the streak on
        good = saved is not None and (not ongoing or saved[1] <= max(steps - streak - 1, 0))
        if saved is None:
            where = "no checkpoint was written before it"
        elif good:
            where = f"last good checkpoint {checkpoint} (epoch {saved[0]})"
        else:
            where = f"no good checkpoint left ({checkpoint}, epoch {saved[0]}, was written after the divergence began)"
        return Diverged(
            f"training diverged at epoch {self.epoch}/{self.cfg.epochs}: {what}; {where}; {self.divergence_advice()}"
        )

    def final_metrics(self) -> dict[str, Any]:
        from morl.metrics import delta_m

        test = self.adapter.evaluate(self.data.batches("test", EVAL_BATCH))
        final = {
            "epoch": self.epoch,
            "val": self.adapter.evaluate(self.data.batches("val", EVAL_BATCH)),
            "test": test,
            "directions": self.directions,
            "headline": self._headline(test),
            "seconds": time.time() - self.started,
        }  # this process's part of the run
        if self.baseline is not None:
            final["delta_m"] = delta_m(test, self.baseline, self.directions)
        return final

    # ----- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        from morl.runners.config import to_dict

        self.saved = (self.epoch, self.adapter.steps)
        rng = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return {
            "format": CHECKPOINT_FORMAT,
            "config": to_dict(self.cfg),
            "epoch": self.epoch,
            "adapter": self.adapter.state_dict(),
            "ordering": self.order.state_dict(),
            "rng": rng,
        }

    def load_state_dict(self, state: dict[str, Any], *, for_evaluation: bool = False) -> None:
        self.adapter.load_state_dict(state["adapter"])
        self.epoch = int(state["epoch"])
        if for_evaluation:
            return
        self.order.load_state_dict(state["ordering"])
        rng = state["rng"]
        torch.set_rng_state(rng["torch"].cpu())
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        if "cuda" in rng and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"].cpu(), self.device)
        self.saved = (self.epoch, self.adapter.steps)
        self.reported = (int(self.adapter.nonfinite_steps), self.adapter.steps)
