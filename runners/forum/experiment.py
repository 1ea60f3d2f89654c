"""FORUM (``morl forum``) as an experiment of the shell: data hyper-cleaning or multi-task loss
weights (Ye et al., ECAI 2024, arXiv:2401.09257, Algorithm 1).

``step()`` is one FORUM iteration (inner loop -> ∇q̃ -> per-objective gradients -> λ QP ->
momentum -> step) of the problem (``hypercleaning.py`` or ``loss_weights.py``); every
``eval_every`` iterations the FORUM diagnostics are logged and the model is evaluated. The
baselines are trained at the end, inside ``final_metrics()``: a run stopped during them has its
last checkpoint at the last iteration, and ``morl resume`` trains them again.

Headline: FORUM's mean test accuracy in % (hyper-cleaning: over the datasets; loss weights: over
the tasks, or their mean test MSE when no task is a classification).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from morl.runners.divergence import Diverged
from morl.runners.errors import UserError
from morl.runners.forum.config import ForumRunConfig
from morl.runners.shell.experiment import Experiment, Schedule

CHECKPOINT_FORMAT = 1


class ForumExperiment(Experiment):
    kind = "forum"
    command = "forum"
    unit = "iteration"
    resume_keys = ("iterations", "eval_every", "checkpoint_every", "checkpoint_minutes", "device")
    device_key = "device"
    config_class = ForumRunConfig
    checkpoint_format = CHECKPOINT_FORMAT

    @classmethod
    def validate(cls, cfg: ForumRunConfig) -> None:
        from morl.runners.config import require

        require(
            cfg,
            {
                "iterations": ">=1",
                "eval_every": ">=1",
                "checkpoint_every": ">=1",
                "checkpoint_minutes": ">0?",
                "forum.inner_steps": ">=1",
                "forum.inner_lr": ">0",
                "forum.rho": ">=0",
                "forum.beta_power": ">=0",
                "hypercleaning.alpha_lr": ">0",
                "hypercleaning.omega_lr": ">0",
                "hypercleaning.noise": "[0,1)",
                "hypercleaning.batch_size": ">=1?",
                "hypercleaning.hidden": ">=1",
                "mtl.alpha_lr": ">0",
                "mtl.lr": ">0",
                "mtl.batch_size": ">0",
                "mtl.hidden": ">=1",
            },
        )
        if not 1 <= cfg.hypercleaning.datasets <= 4:
            raise UserError(f"hypercleaning.datasets must be between 1 and 4, got {cfg.hypercleaning.datasets}")

    def __init__(self, cfg: ForumRunConfig, *, for_evaluation: bool = False) -> None:
        from morl.runners.device import resolve_device
        from morl.runners.forum.hypercleaning import HyperCleaningProblem
        from morl.runners.forum.loss_weights import LossWeightProblem

        self.cfg = cfg
        self.device = self.map_location = resolve_device(cfg.device)
        torch.manual_seed(cfg.seed)
        problem = HyperCleaningProblem if cfg.problem == "hypercleaning" else LossWeightProblem
        self.problem = problem(cfg, self.device)
        # Seeded after the build: a first import of the data libraries draws from Python's generator.
        random.seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)
        self.iteration = 0
        self.diag: dict[str, torch.Tensor] | None = None
        self.saved: int | None = None  # iteration of the checkpoint on disk
        self.clock = (time.perf_counter(), 0)  # (time, iteration) at the last log point

    @property
    def position(self) -> int:
        return self.iteration

    @property
    def task_names(self) -> list[str]:
        return list(self.problem.names)

    def layout_tags(self) -> dict[str, Any]:
        # FORUM's aggregation weights are λ̃ (Algorithm 1's momentum of the QP's λ)
        return {
            "weight_tag": "forum/lambda_tilde",
            "conflict_tags": (),
            "speed_tags": ("perf/seconds_per_iteration",),
            **self.problem.layout_tags,
        }

    @property
    def schedule(self) -> Schedule:
        cfg = self.cfg
        return Schedule(cfg.iterations, cfg.eval_every, cfg.eval_every, cfg.checkpoint_every, cfg.checkpoint_minutes)

    # ----- the work -----------------------------------------------------------------------
    def step(self) -> None:
        try:
            self.diag = self.problem.step(self.iteration + 1)
        except ValueError as exc:
            if "not finite" not in str(exc):
                raise
            raise self._diverged(str(exc)) from None  # raised before the step: the state is the last iteration's
        self.iteration += 1

    def divergence_advice(self) -> str:
        from morl.runners.divergence import advice

        return advice(self.problem.learning_rates, None)

    def _diverged(self, what: str) -> Diverged:
        from morl.runners.run_dir import CHECKPOINT_DIR, LAST_CHECKPOINT

        checkpoint = Path(self.run_dir or ".") / CHECKPOINT_DIR / LAST_CHECKPOINT
        where = (
            "no checkpoint was written before it"
            if self.saved is None
            else f"last good checkpoint {checkpoint} (iteration {self.saved})"
        )
        return Diverged(
            f"training diverged at iteration {self.iteration + 1}/{self.cfg.iterations}: {what}; {where}; "
            f"{self.divergence_advice()}"
        )

    def log_metrics(self) -> dict[str, Any]:
        """The FORUM diagnostics of the last iteration (Algorithm 1's q̃, ν, λ̃, barrier, KKT)."""
        diag, names = self.diag, self.problem.names
        now = time.perf_counter()
        out: dict[str, Any] = {
            "forum/upper_loss": {**_per_name(diag["upper"], names), "mean": diag["upper"].double().mean()},
            "forum/lambda_tilde": _per_name(diag["lam_tilde"], names),
            "forum/lambda": _per_name(diag["lam"], names),
            **{
                f"forum/{key}": diag[key]
                for key in ("lower", "q_tilde", "constraint_grad_norm", "nu", "barrier", "kkt", "beta")
            },
            **self.problem.diagnostics(diag),
            "perf/seconds_per_iteration": (now - self.clock[0]) / max(self.iteration - self.clock[1], 1),
        }
        self.clock = (now, self.iteration)
        return out

    def evaluate(self, **options: Any) -> dict[str, Any]:
        return self.problem.evaluate()

    def summary(self, metrics: dict[str, Any]) -> str:
        if "forum" in metrics:  # final_metrics.json
            return "; ".join(
                f"{method}: " + ", ".join(f"{k}={v:.2f}" for k, v in values.items() if isinstance(v, float))
                for method, values in metrics.items()
                if isinstance(values, dict)
            )
        if "headline" not in metrics or self.diag is None:
            return ""
        return self.problem.summary(metrics, self.diag)

    def final_metrics(self) -> dict[str, Any]:
        """FORUM's test metrics, then the baselines trained on the same data (deterministic: a
        resume that trains them again gets the same numbers)."""
        final = {"forum": self.problem.final_metrics()}
        if self.problem.has_baselines:
            print("morl forum: training the baselines on the same data ...", flush=True)
            final.update(self.problem.baselines())
        return final

    # ----- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        from morl.runners.config import to_dict

        self.saved = self.iteration
        rng = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return {
            "format": CHECKPOINT_FORMAT,
            "config": to_dict(self.cfg),
            "iteration": self.iteration,
            "problem": self.problem.state_dict(),
            "rng": rng,
        }

    def load_state_dict(self, state: dict[str, Any], *, for_evaluation: bool = False) -> None:
        self.problem.load_state_dict(state["problem"])
        self.iteration = self.saved = int(state["iteration"])
        self.clock = (time.perf_counter(), self.iteration)
        if for_evaluation:
            return
        rng = state["rng"]
        torch.set_rng_state(rng["torch"].cpu())
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        if "cuda" in rng and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"].cpu(), self.device)


def _per_name(values: torch.Tensor, names: list[str]) -> dict[str, float]:
    return dict(zip(names, values.detach().double().cpu().tolist()))
