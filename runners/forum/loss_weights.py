"""FORUM multi-task loss-weight learning as the problem of a ``morl forum`` run (Ye et al., ECAI
2024, arXiv:2401.09257, §5.2): loss weights softmax(α) of the supervised adapter learned against
the upper-level (validation) losses (morl.agents.supervised.loss_weight_learning).

The baseline trains the same model through the same adapter with equal loss weights on the same
training batches; ``comparison.delta_m_forum_vs_equal`` is Δm% of FORUM against it.
"""

from __future__ import annotations

from typing import Any

import torch

from morl.runners.errors import UserError

EVAL_BATCH = 512


class LossWeightProblem:
    def __init__(self, cfg, device: torch.device) -> None:
        from morl.envs.data.supervised import load_dataset

        self.cfg, self.device = cfg, device
        mc = cfg.mtl
        try:
            self.data = load_dataset(mc.data.name, seed=cfg.seed, **mc.data.options)
        except (ValueError, TypeError, FileNotFoundError, ImportError) as exc:
            raise UserError(f"mtl.data: {exc}") from None
        self.has_baselines = mc.baseline
        self.names = self.data.task_names
        self.learning_rates = "mtl.alpha_lr, mtl.lr, forum.inner_lr"
        self.layout_tags: dict[str, str] = {}  # test metrics are test/<task>/<metric>: no per-task chart of them
        self.gen = torch.Generator().manual_seed(cfg.seed + 11)
        self.learner = self._build(forum=True)
        self.iters_per_epoch = max(1, self.data.train[0].shape[0] // mc.batch_size)

    @property
    def forum(self):
        return self.learner.forum

    def _build(self, forum: bool):
        from morl.agents.supervised.loss_weight_learning import LossWeightLearner
        from morl.agents.supervised.multitask import MultiHeadMLP, MultiTaskLoss, SupervisedMTL
        from morl.aggregators import build

        mc, f = self.cfg.mtl, self.cfg.forum
        torch.manual_seed(self.cfg.seed)
        model = MultiHeadMLP(self.data.in_dim, mc.hidden, self.data.specs).to(self.device)
        opt = torch.optim.Adam(model.parameters(), lr=mc.lr, weight_decay=mc.weight_decay)
        adapter = SupervisedMTL(model, build("mean"), opt, shared="trunk", loss_fn=MultiTaskLoss(self.data.specs))
        if not forum:
            return adapter
        return LossWeightLearner(
            adapter, len(self.names), alpha_lr=mc.alpha_lr, inner_lr=f.inner_lr, inner_steps=f.inner_steps, rho=f.rho,
            beta_power=f.beta_power, normalize_upper=f.normalize_upper, upper_split=mc.upper_split,
        )  # fmt: skip

    def _batch(self, split: str):
        x, y = self.data.split(split)
        rows = torch.randint(0, x.shape[0], (self.cfg.mtl.batch_size,), generator=self.gen)
        return x[rows], y[rows]

    def step(self, k: int) -> dict[str, torch.Tensor]:
        f = self.cfg.forum
        beta = None
        if f.beta_per_epoch:
            beta = float((k - 1) // self.iters_per_epoch + 1) ** (-f.beta_power)
        self.learner.forum.warm_start = f.warm_start
        return self.learner.step(self._batch("train"), self._batch(self.cfg.mtl.upper_split), beta=beta)

    def diagnostics(self, diag: dict[str, torch.Tensor]) -> dict[str, Any]:
        return {"forum/loss_weight": dict(zip(self.names, diag["weights"].double().cpu().tolist()))}

    def _test(self, adapter) -> dict[str, float]:
        return adapter.evaluate(self.data.batches("test", EVAL_BATCH))

    def evaluate(self) -> dict[str, Any]:
        test = self._test(self.learner.adapter)
        return {"test": test, "headline": _headline(_percent(test))}

    def summary(self, m: dict[str, Any], diag: dict[str, torch.Tensor]) -> str:
        weights = ", ".join(f"{v:.3f}" for v in diag["weights"].tolist())
        return f"mean test acc {m['headline']:.2f}%, loss weights [{weights}], q̃ {float(diag['q_tilde']):.3g}"

    def final_metrics(self) -> dict[str, float]:
        out = _percent(self._test(self.learner.adapter))
        out.update({f"{n}/loss_weight": float(w) for n, w in zip(self.names, self.learner.weights().tolist())})
        return out

    def baselines(self) -> dict[str, dict[str, float]]:
        from morl.metrics import delta_m

        adapter = self._build(forum=False)
        self.gen.manual_seed(self.cfg.seed + 11)  # the same training batches as FORUM's lower level
        for _ in range(self.cfg.iterations):
            adapter.step(self._batch("train"))
        base = _percent(self._test(adapter))
        directions = {k: v for k, v in adapter.metric_directions().items() if not k.endswith("/loss")}
        # Δm% of FORUM against equal weights over the test metrics (negative = FORUM better).
        return {
            "equal_weights": base,
            "comparison": {"delta_m_forum_vs_equal": float(delta_m(self.final_metrics(), base, directions))},
        }

    def state_dict(self) -> dict[str, Any]:
        return {"learner": self.learner.state_dict(), "generator": self.gen.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["learner"])
        self.gen.set_state(state["generator"])


def _percent(metrics: dict[str, float]) -> dict[str, float]:
    return {k: (100.0 * v if k.endswith("/accuracy") else v) for k, v in metrics.items()}


def _headline(test: dict[str, float]) -> float:
    """Mean test accuracy in % (mean test MSE when no task is a classification)."""
    for suffix in ("/accuracy", "/mse"):
        values = [v for k, v in test.items() if k.endswith(suffix)]
        if values:
            return sum(values) / len(values)
    return float("nan")
