"""A mixture of soft prompts trained with MosT (``morl prompt``) as an experiment of the shell.

``step()`` is one outer step (MosT: Li et al., ICLR 2025, arXiv:2403.04099, Algorithm 1): sample
``batch_size`` training instances (the objectives), one batched forward of all ``m`` prompts,
per-prompt weights from MosT / MGDA / linearisation, one backward and Adam step per inner step.
The last step also fits the dispatcher on the training assignment and measures the routed
accuracy (the kind's headline, ``test.routed_acc`` in ``final_metrics.json``); the dispatcher
goes into the last checkpoint, so ``morl eval`` routes with it. Until then the headline of an
evaluation is the oracle accuracy (each instance answered by its best prompt), the upper bound of
the routed accuracy.
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
from morl.runners.prompt.config import PromptConfig, validate
from morl.runners.shell.experiment import Experiment, Schedule

CHECKPOINT_FORMAT = 1


class PromptExperiment(Experiment):
    kind = "prompt"
    command = "prompt"
    unit = "step"
    resume_keys = ("steps", "log_every", "eval_every", "checkpoint_every", "checkpoint_minutes", "threads", "device")
    device_key = "device"
    config_class = PromptConfig
    checkpoint_format = CHECKPOINT_FORMAT

    def __init__(self, cfg: PromptConfig, *, for_evaluation: bool = False) -> None:
        from morl.runners.device import resolve_device
        from morl.runners.prompt.build import build_trainer, load_data, load_encoder, tokenized_splits

        self.cfg, self.for_evaluation = cfg, for_evaluation
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = self.map_location = resolve_device(cfg.device)
        self.data = load_data(cfg)
        self.encoder, tokenizer = load_encoder(cfg)
        self.ids, self.labels = tokenized_splits(cfg, self.data, tokenizer, self.device)
        self.mixture, self.trainer = build_trainer(cfg, self.data.num_classes, self.encoder, self.device)
        self.names = [f"prompt{j}" for j in range(cfg.prompts.num)]
        self.step_count = 0
        self.dispatcher = None  # fitted at the last step
        self.final: dict[str, Any] | None = None  # the end-of-run metrics, computed with the dispatcher
        self.seconds = 0.0  # training wall-clock time, summed over sessions
        self.saved: int | None = None  # step of the checkpoint on disk
        self._interval = self._empty_interval()
        if not for_evaluation:  # last, so that building draws exactly as before; nothing of the run uses them
            random.seed(cfg.seed)
            np.random.seed(cfg.seed % 2**32)
        print(
            f"morl prompt: method={cfg.method}, encoder={cfg.encoder}, m={cfg.prompts.num} prompts x {cfg.prompts.length} "
            f"tokens, n={cfg.batch_size} instances/step, {cfg.steps} steps",
            flush=True,
        )

    @classmethod
    def validate(cls, cfg: PromptConfig) -> None:
        validate(cfg)

    @property
    def position(self) -> int:
        return self.step_count

    @property
    def schedule(self) -> Schedule:
        c = self.cfg
        return Schedule(c.steps, c.log_every, c.eval_every, c.checkpoint_every, c.checkpoint_minutes)

    # ----- the work -----------------------------------------------------------------------
    def step(self) -> None:
        t0 = time.perf_counter()
        self.dispatcher = self.final = None  # a finished run trained further: fitted again at its new end
        n_train = self.labels["train"].shape[0]
        idx = torch.randperm(n_train, generator=self.trainer.generator)[: self.cfg.batch_size].to(self.device)
        ids, mask = (t[idx] for t in self.ids["train"])
        try:
            out = self.trainer.step(ids, mask, self.labels["train"][idx])
        except FloatingPointError as exc:  # raised before the update: the state is the last step's
            raise self._diverged(str(exc)) from None
        self.step_count += 1
        self._accumulate(out)
        if self.step_count == self.cfg.steps:
            self._finish()
        self.seconds += time.perf_counter() - t0

    def _diverged(self, what: str) -> Diverged:
        from morl.runners.run_dir import CHECKPOINT_DIR, LAST_CHECKPOINT

        checkpoint = Path(self.run_dir or ".") / CHECKPOINT_DIR / LAST_CHECKPOINT
        where = (
            "no checkpoint was written before it"
            if self.saved is None
            else f"last good checkpoint {checkpoint} (step {self.saved})"
        )
        return Diverged(f"training diverged at step {self.step_count + 1}/{self.cfg.steps}: {what}; {where}")

    def divergence_advice(self) -> str:
        from morl.runners.divergence import advice

        return advice("optim.lr", None)

    def _empty_interval(self) -> dict[str, Any]:
        return {"loss": 0.0, "gamma_share": 0.0, "steps": 0}

    def _accumulate(self, out: dict[str, Any]) -> None:
        acc = self._interval
        acc["loss"] = acc["loss"] + out["losses"].mean(1)
        if out["gamma"] is not None:
            acc["gamma_share"] = acc["gamma_share"] + out["gamma"].sum(0) / out["gamma"].sum()
        acc["steps"] += 1

    def _finish(self) -> None:
        """Fit the dispatcher on the training assignment; routed accuracy on val and test.

        The fit reseeds torch: the training RNG is put back afterwards, so that a finished run
        resumed with more steps goes on exactly as a longer run would.
        """
        from morl.runners.prompt.routing import evaluate, fit_dispatcher, split_metrics

        rng = torch.get_rng_state()
        train_losses, train_correct = evaluate(self.mixture, *self.ids["train"], self.labels["train"])
        disp, targets, agreement = fit_dispatcher(
            self.cfg, self.mixture, self.encoder, self.ids["train"], train_losses, self.device
        )
        torch.set_rng_state(rng)
        final: dict[str, Any] = {
            "method": self.cfg.method,
            "steps": self.step_count,
            "train": split_metrics(train_correct),
        }
        final["train"]["assignment_share"] = (targets.sum(0) / targets.shape[0]).tolist()
        final["train"]["dispatcher_agreement"] = agreement
        for split in ("val", "test"):
            final[split] = self._routed(disp, split)
        self.dispatcher, self.final = disp, final

    def _routed(self, disp, split: str) -> dict[str, Any]:
        from morl.runners.prompt.routing import routed_metrics

        d = self.data
        return routed_metrics(
            self.mixture, self.encoder, disp, self.ids[split], self.labels[split], d.domains.get(split), d.domain_names
        )

    def log_metrics(self) -> dict[str, Any]:
        """Training loss and Γ's share per prompt, averaged over the steps since the last record."""
        acc, self._interval = self._interval, self._empty_interval()
        if not acc["steps"]:
            return {}
        loss = acc["loss"] / acc["steps"]
        out: dict[str, Any] = {"train/loss": {**dict(zip(self.names, loss)), "mean": loss.mean()}}
        if torch.is_tensor(acc["gamma_share"]):
            out["train/gamma_share"] = dict(zip(self.names, acc["gamma_share"] / acc["steps"]))
        return out

    def evaluate(self, **options: Any) -> dict[str, Any]:
        """Validation accuracy per prompt, best single prompt and oracle; ``headline``: the oracle
        accuracy. ``morl eval`` of a finished run also routes val and test with the stored dispatcher
        (``headline``: test routed accuracy)."""
        from morl.runners.prompt.routing import evaluate, split_metrics

        _, correct = evaluate(self.mixture, *self.ids["val"], self.labels["val"])
        val = split_metrics(correct)
        out = {
            "val/prompt_acc": dict(zip(self.names, val["prompt_acc"])),
            "val/best_single_acc": val["best_single_acc"],
            "val/oracle_acc": val["oracle_acc"],
            "headline": val["oracle_acc"],
        }
        if self.for_evaluation and self.dispatcher is not None:
            for split in ("val", "test"):
                m = self._routed(self.dispatcher, split)
                out.update(
                    {
                        f"{split}/routed_acc": m["routed_acc"],
                        f"{split}/route_share": dict(zip(self.names, m["route_share"])),
                    }
                )
            out["headline"] = out["test/routed_acc"]
        return out

    def summary(self, metrics: dict[str, Any]) -> str:
        if "test" in metrics:  # the final metrics
            t = metrics["test"]
            return (
                f"test: routed acc {t['routed_acc']:.4f}  best single prompt {t['best_single_acc']:.4f}  "
                f"oracle {t['oracle_acc']:.4f}  route shares {' '.join(f'{s:.2f}' for s in t['route_share'])}"
            )
        if "val/oracle_acc" not in metrics:
            return ""
        accs = " ".join(f"{a:.3f}" for a in metrics["val/prompt_acc"].values())
        return f"val acc per prompt {accs}  oracle {metrics['val/oracle_acc']:.3f}"

    def final_metrics(self) -> dict[str, Any]:
        final = dict(self.final or {})
        if final:
            final["headline"] = final["test"]["routed_acc"]
        return {**final, "seconds": self.seconds}

    # ----- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self.saved = self.step_count  # the shell calls this to write the checkpoint
        state = {
            "format": CHECKPOINT_FORMAT,
            "config": self.config_dict(),
            **self.trainer.state_dict(),
            "step": self.step_count,
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
            "interval": self._interval,
            "seconds": self.seconds,
            "final": self.final,
        }
        if self.dispatcher is not None:
            state["dispatcher"] = self.dispatcher.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any], *, for_evaluation: bool = False) -> None:
        done = int(state["step"])
        if not for_evaluation and done > self.cfg.steps:
            raise UserError(f"steps={self.cfg.steps} is below the checkpoint's step {done}; give steps >= {done}")
        self.trainer.load_state_dict(state)
        self.step_count = self.saved = done
        if "dispatcher" in state:
            self.dispatcher = self._dispatcher(state["dispatcher"])
        if for_evaluation:
            return
        self.final, self.seconds, self._interval = state["final"], float(state["seconds"]), state["interval"]
        rng = state["rng"]
        torch.set_rng_state(rng["torch"].cpu())
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])

    def _dispatcher(self, weights: dict[str, Any]):
        from morl.agents.prompts.dispatcher import Dispatcher

        keys_dim = self.mixture.prompts.shape[-1]
        disp = Dispatcher(keys_dim, self.cfg.dispatcher.hidden, self.cfg.prompts.num).to(self.device)
        disp.load_state_dict(weights)
        return disp
