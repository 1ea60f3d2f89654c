"""A new kind of run, in one file: the worked example of docs/architecture.md.

Two objectives f_k(x) = ½‖x − a_k‖² share one parameter vector x; each step takes noisy
per-objective gradients, combines them with a morl aggregator and takes one SGD step. The
shell does everything else (run directory, logging, progress bar, checkpoints, Ctrl-C,
``morl resume``, ``morl eval``). To make it a ``morl`` command, add
``"quadratic": "docs.examples.new_kind:QuadraticExperiment"`` (its real module path) to
``runners/shell/kinds.py`` and a 10-line command module like ``runners/train.py``.
tests/runners/shell/ runs exactly this file (its conftest.py registers it as the kind `quadratic`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

import morl
from morl.runners.config import require
from morl.runners.errors import UserError
from morl.runners.shell.experiment import Experiment, Schedule


@dataclass
class QuadraticConfig:
    name: str = "quadratic"
    out_dir: str = "runs"
    seed: int = 0
    dim: int = 8
    steps: int = 40
    lr: float = 0.1
    noise: float = 0.1
    aggregator: str = "mgda"
    log_every: int = 5
    eval_every: int = 10
    checkpoint_every: int = 10
    checkpoint_minutes: float | None = None


class QuadraticExperiment(Experiment):
    kind = "quadratic"
    command = "quadratic"
    unit = "step"
    resume_keys = ("steps", "log_every", "eval_every", "checkpoint_every", "checkpoint_minutes")
    config_class = QuadraticConfig

    @classmethod
    def validate(cls, cfg: QuadraticConfig) -> None:
        require(
            cfg,
            {
                "dim": ">=1",
                "steps": ">=1",
                "lr": ">0",
                "noise": ">=0",
                "log_every": ">=1",
                "eval_every": ">=1",
                "checkpoint_every": ">=1",
                "checkpoint_minutes": ">0?",
            },
        )
        if cfg.aggregator not in morl.available():
            raise UserError(f"aggregator: unknown {cfg.aggregator!r}; allowed: {', '.join(morl.available())}")

    def __init__(self, cfg: QuadraticConfig, *, for_evaluation: bool = False) -> None:
        self.cfg, self.position = cfg, 0
        self.targets = torch.randn(2, cfg.dim, generator=torch.Generator().manual_seed(cfg.seed))
        self.x = torch.zeros(cfg.dim, requires_grad=True)
        self.opt = torch.optim.SGD([self.x], lr=cfg.lr, momentum=0.9)
        self.aggregator = morl.build(cfg.aggregator)
        self.noise = torch.Generator().manual_seed(cfg.seed + 1)  # its state is part of the checkpoint

    @property
    def schedule(self) -> Schedule:
        c = self.cfg
        return Schedule(c.steps, c.log_every, c.eval_every, c.checkpoint_every, c.checkpoint_minutes)

    def losses(self, x: torch.Tensor | None = None) -> torch.Tensor:
        return 0.5 * ((self.x if x is None else x) - self.targets).pow(2).sum(dim=1)

    def step(self) -> None:
        self.opt.zero_grad()
        shifted = self.x + self.cfg.noise * torch.randn(self.x.shape, generator=self.noise)
        morl.backward(self.losses(shifted), [self.x], self.aggregator)
        self.opt.step()
        self.position += 1

    def log_metrics(self) -> dict[str, Any]:
        with torch.no_grad():
            return {
                "train/loss": dict(zip("ab", self.losses())),
                "aggregator/weight": dict(zip("ab", self.aggregator.weights)),
            }

    def evaluate(self, **options: Any) -> dict[str, Any]:
        with torch.no_grad():
            losses = self.losses()
        return {"eval/loss": dict(zip("ab", losses)), "headline": float(losses.max())}

    def watch(self) -> str | None:
        from morl.runners.divergence import Diverged

        if not bool(self.x.abs().max() < 1e6):  # also catches NaN; one host read per log/checkpoint point
            raise Diverged(f"training diverged at step {self.position}: |x| > 1e6; lower lr")
        return None

    def final_metrics(self) -> dict[str, Any]:
        return self.evaluate()

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": self.checkpoint_format,
            "config": self.config_dict(),
            "x": self.x.detach().clone(),
            "opt": self.opt.state_dict(),
            "aggregator": self.aggregator.state_dict(),
            "noise": self.noise.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any], *, for_evaluation: bool = False) -> None:
        with torch.no_grad():
            self.x.copy_(state["x"])
        self.position = int(state["position"])
        if not for_evaluation:
            self.opt.load_state_dict(state["opt"])
            self.aggregator.load_state_dict(state["aggregator"])
            self.noise.set_state(state["noise"])
