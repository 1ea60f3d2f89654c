"""FORUM data hyper-cleaning as the problem of a ``morl forum`` run (Ye et al., "A First-Order
Multi-Gradient Algorithm for Multi-Objective Bi-Level Optimization", ECAI 2024, arXiv:2401.09257,
§5.1): per-sample weights σ(α) on rotated digit shards with noisy labels
(morl.agents.supervised.hypercleaning).

The reported test metrics are those of the evaluation with the best mean val-2 accuracy; the
baselines train plain models on the noisy labels, without and with the clean val-1 sets.
"""

from __future__ import annotations

from typing import Any

import torch

from morl.runners.errors import UserError


class HyperCleaningProblem:
    def __init__(self, cfg, device: torch.device) -> None:
        from morl.agents.supervised.hypercleaning import HyperCleaner
        from morl.envs.data.hypercleaning import make_hypercleaning_data

        hc, f = cfg.hypercleaning, cfg.forum
        self.cfg = cfg
        try:
            self.data = make_hypercleaning_data(hc.datasets, hc.noise, cfg.seed).to(device)
        except ValueError as exc:
            raise UserError(f"hypercleaning: {exc}") from None
        self.cleaner = HyperCleaner(
            self.data, hidden=tuple(hc.hidden), alpha_lr=hc.alpha_lr, omega_lr=hc.omega_lr, inner_lr=f.inner_lr,
            inner_steps=f.inner_steps, rho=f.rho, beta_power=f.beta_power, alpha_init=hc.alpha_init,
            batch_size=hc.batch_size, seed=cfg.seed,
        )  # fmt: skip
        self.cleaner.forum.normalize_upper = f.normalize_upper
        self.cleaner.forum.warm_start = f.warm_start
        self.names = [f"dataset{i}" for i in range(self.data.m)]
        self.has_baselines = hc.baselines
        self.learning_rates = "hypercleaning.alpha_lr, hypercleaning.omega_lr, forum.inner_lr"
        self.best_val2: float | None = None  # before the first evaluation
        self.best_test = None
        self.layout_tags = {"success_tag": "test/accuracy"}  # test/accuracy/<dataset>

    @property
    def forum(self):
        return self.cleaner.forum

    def step(self, k: int) -> dict[str, torch.Tensor]:
        return self.cleaner.step()

    def diagnostics(self, diag: dict[str, torch.Tensor]) -> dict[str, Any]:
        return {}

    def evaluate(self) -> dict[str, Any]:
        """Val-2 and test metrics (in %) and the weights of clean vs corrupted samples; keeps the
        test metrics of the best val-2 evaluation."""
        from morl.agents.supervised.hypercleaning import evaluate

        val2 = evaluate(self.cleaner.model, self.data.val2)
        test = evaluate(self.cleaner.model, self.data.test)
        score = float(val2["accuracy"].mean())
        if self.best_val2 is None or score > self.best_val2:
            self.best_val2 = score
            self.best_test = {k: v.clone() for k, v in test.items()}
        weights = self.cleaner.weight_stats()
        return {
            "val2/accuracy": self._per_dataset(val2["accuracy"]),
            "test/accuracy": self._per_dataset(test["accuracy"]),
            "test/f1": self._per_dataset(test["f1"]),
            "weights/weight_clean": float(weights["weight_clean"]),
            "weights/weight_corrupted": float(weights["weight_corrupted"]),
            "headline": float(test["accuracy"].mean()),
        }

    def _per_dataset(self, values: torch.Tensor) -> dict[str, float]:
        values = values.double().cpu()
        return {**dict(zip(self.names, values.tolist())), "mean": float(values.mean())}

    def summary(self, m: dict[str, Any], diag: dict[str, torch.Tensor]) -> str:
        return (f"test acc {m['test/accuracy']['mean']:.2f}%, weight clean {m['weights/weight_clean']:.3f} vs corrupted "
                f"{m['weights/weight_corrupted']:.3f}, q̃ {float(diag['q_tilde']):.3g}, ν {float(diag['nu']):.3g}")  # fmt: skip

    def final_metrics(self) -> dict[str, float]:
        best = {} if self.best_val2 is None else {"best_val2_accuracy": self.best_val2}
        return _test_summary(self.best_test, self.names) | best

    def baselines(self) -> dict[str, dict[str, float]]:
        from morl.agents.supervised.hypercleaning import train_plain

        hc = self.cfg.hypercleaning
        out = {}
        for key, with_val1 in (("plain_noisy", False), ("plain_noisy_plus_val1", True)):
            _, test = train_plain(self.data, steps=self.cfg.iterations, hidden=tuple(hc.hidden), lr=hc.omega_lr,
                                  include_val1=with_val1, eval_every=self.cfg.eval_every, seed=self.cfg.seed)  # fmt: skip
            out[key] = _test_summary(test, self.names)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "cleaner": self.cleaner.state_dict(),
            "generator": self.cleaner.gen.get_state(),
            "best_val2": self.best_val2,
            "best_test": self.best_test,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.cleaner.load_state_dict(state["cleaner"])
        self.cleaner.gen.set_state(state["generator"])
        best = state["best_val2"]
        self.best_val2 = None if best is None or best < 0 else float(best)  # < 0: an older checkpoint's "none yet"
        self.best_test = state["best_test"]


def _test_summary(test: dict[str, torch.Tensor] | None, names: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    if test is None:  # no evaluation yet
        return out
    for metric in ("accuracy", "f1"):
        values = test[metric].tolist()
        out.update({f"{n}/{metric}": float(v) for n, v in zip(names, values)})
        out[f"mean/{metric}"] = float(sum(values) / len(values))
    return out
