"""Multi-objective data hyper-cleaning with FORUM (Ye et al., arXiv:2401.09257, §5.1), on scikit-learn's
bundled digits (the data: morl.envs.data.hypercleaning).

m corrupted datasets share one MLP trunk and have one head each. Dataset i has a training set
whose labels are 50% corrupted (replaced by another class drawn uniformly), a clean val-1 set
(the upper level), a clean val-2 set (model selection) and a clean test set. The upper level
learns one weight α_ij per training sample:

    min_{α, ω} (L_1^val(ω), …, L_m^val(ω))   s.t.  ω ∈ argmin_ω Σ_i (1/N_i) Σ_j σ(α_ij) ℓ(ω; x_ij, y_ij)

Here the m datasets are disjoint shards of the digits, shard i rotated by i·90° so that each is
its own domain (the paper uses MNIST and FashionMNIST, which cannot be shipped). F does not
depend on α, so α moves only through ν·∇_α q̃.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from morl.agents.supervised.multitask import MultiHeadMLP, TaskSpec
from morl.bilevel import FORUM

__all__ = ["HyperCleaner", "macro_f1", "train_plain"]

Split = tuple[torch.Tensor, torch.Tensor]


class HyperCleaningData(Protocol):
    """What the learner reads of its data; the runner hands it ``morl.envs.data.hypercleaning``'s
    data set; the learner depends on no data module."""

    train: list[Split]
    clean: list[torch.Tensor]  # per data set: which training labels are uncorrupted
    val1: list[Split]
    val2: list[Split]
    test: list[Split]
    num_classes: int

    @property
    def m(self) -> int: ...

    @property
    def in_dim(self) -> int: ...


def macro_f1(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Macro-averaged F1 over the classes present in ``target`` or ``pred``."""
    idx = target * num_classes + pred
    conf = torch.bincount(idx, minlength=num_classes * num_classes).reshape(num_classes, num_classes).double()
    tp = conf.diagonal()
    support, predicted = conf.sum(1), conf.sum(0)
    f1 = 2 * tp / (support + predicted).clamp_min(1)
    present = (support + predicted) > 0
    return f1[present].mean()


def _per_dataset_ce(model: nn.Module, splits: list[Split], weights: list[torch.Tensor] | None = None) -> torch.Tensor:
    """[m] mean (optionally σ(α)-weighted) cross-entropy, dataset i through head i."""
    losses = []
    for i, (x, y) in enumerate(splits):
        ce = nn.functional.cross_entropy(model(x)[i], y, reduction="none")
        losses.append((ce if weights is None else torch.sigmoid(weights[i]) * ce).mean())
    return torch.stack(losses)


def build_model(data: HyperCleaningData, hidden: tuple[int, ...], seed: int) -> MultiHeadMLP:
    torch.manual_seed(seed)
    specs = [TaskSpec(f"dataset{i}", "classification", data.num_classes) for i in range(data.m)]
    return MultiHeadMLP(data.in_dim, list(hidden), specs)


@torch.no_grad()
def evaluate(model: nn.Module, splits: list[Split], num_classes: int = 10) -> dict[str, torch.Tensor]:
    """Per-dataset accuracy and macro-F1 ([m] tensors, in %) and mean loss."""
    model.eval()
    acc, f1, loss = [], [], []
    for i, (x, y) in enumerate(splits):
        logits = model(x)[i]
        pred = logits.argmax(-1)
        acc.append((pred == y).double().mean() * 100)
        f1.append(macro_f1(pred, y, num_classes) * 100)
        loss.append(nn.functional.cross_entropy(logits, y).double())
    model.train()
    return {"accuracy": torch.stack(acc), "f1": torch.stack(f1), "loss": torch.stack(loss)}


class HyperCleaner:
    """FORUM over (α: per-sample weight logits, ω: the multi-head MLP) on a :class:`HyperCleaningData`.

    Defaults follow the paper (§5.1): SGD with lr 10 on α and 0.3 on ω, T = 16 inner SGD steps
    with η = 0.3, ρ = 0.5, β_k = (k+1)^(−3/4). ``batch_size`` None uses full batches (the
    digits shards are small); an int samples that many training and val-1 rows per dataset.
    """

    def __init__(
        self,
        data: HyperCleaningData,
        *,
        hidden: tuple[int, ...] = (128, 64),
        alpha_lr: float = 10.0,
        omega_lr: float = 0.3,
        inner_lr: float = 0.3,
        inner_steps: int = 16,
        rho: float = 0.5,
        beta_power: float = 0.75,
        alpha_init: float = 0.0,
        batch_size: int | None = None,
        seed: int = 0,
    ) -> None:
        self.data = data
        self.model = build_model(data, hidden, seed)
        device = data.train[0][0].device
        self.model.to(device)
        self.alpha = [torch.full((x.shape[0],), alpha_init, device=device, requires_grad=True) for x, _ in data.train]
        omega = list(self.model.parameters())
        opt = torch.optim.SGD([{"params": self.alpha, "lr": alpha_lr}, {"params": omega, "lr": omega_lr}])
        self.batch_size = batch_size
        self.gen = torch.Generator(device="cpu").manual_seed(seed + 7)
        self.forum = FORUM(
            self.alpha, omega, self._upper, self._lower,
            inner_steps=inner_steps, inner_lr=inner_lr, rho=rho, beta_power=beta_power, optimizer=opt,
        )  # fmt: skip

    def _rows(self, n: int) -> torch.Tensor | None:
        if self.batch_size is None or self.batch_size >= n:
            return None
        return torch.randperm(n, generator=self.gen)[: self.batch_size]

    def _lower(self, rows: list) -> torch.Tensor:
        total = 0.0
        for i, ((x, y), a, r) in enumerate(zip(self.data.train, self.alpha, rows)):
            if r is not None:
                x, y, a = x[r.to(x.device)], y[r.to(x.device)], a[r.to(x.device)]
            ce = nn.functional.cross_entropy(self.model(x)[i], y, reduction="none")
            total = total + (torch.sigmoid(a) * ce).mean()
        return total

    def _upper(self, rows: list) -> torch.Tensor:
        splits = [
            (x, y) if r is None else (x[r.to(x.device)], y[r.to(x.device)]) for (x, y), r in zip(self.data.val1, rows)
        ]
        return _per_dataset_ce(self.model, splits)

    def step(self) -> dict[str, torch.Tensor]:
        """One FORUM iteration (fresh mini-batches when ``batch_size`` is set)."""
        lower_rows = [self._rows(x.shape[0]) for x, _ in self.data.train]
        upper_rows = [self._rows(x.shape[0]) for x, _ in self.data.val1]
        return self.forum.step((lower_rows,), (upper_rows,))

    @torch.no_grad()
    def weight_stats(self) -> dict[str, torch.Tensor]:
        """Mean σ(α) over clean and over corrupted training samples (all datasets together)."""
        w = torch.cat([torch.sigmoid(a) for a in self.alpha])
        clean = torch.cat(self.data.clean)
        return {"weight_clean": w[clean].mean(), "weight_corrupted": w[~clean].mean()}

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "alpha": [a.detach().clone() for a in self.alpha],
            "forum": self.forum.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        with torch.no_grad():
            for a, s in zip(self.alpha, state["alpha"]):
                a.copy_(s)
        self.forum.load_state_dict(state["forum"])


def train_plain(
    data: HyperCleaningData,
    *,
    steps: int,
    hidden: tuple[int, ...] = (128, 64),
    lr: float = 0.3,
    include_val1: bool = False,
    eval_every: int = 50,
    seed: int = 0,
) -> tuple[MultiHeadMLP, dict[str, torch.Tensor]]:
    """The baseline: full-batch SGD on the unweighted noisy training loss (sum over datasets).

    ``include_val1`` also trains on the clean val-1 sets, i.e. on the same data FORUM sees.
    The model with the best mean val-2 accuracy (checked every ``eval_every`` steps) is kept.
    Returns the model and its test metrics.
    """
    model = build_model(data, hidden, seed).to(data.train[0][0].device)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    splits = [
        (torch.cat([x, xv]), torch.cat([y, yv])) if include_val1 else (x, y)
        for (x, y), (xv, yv) in zip(data.train, data.val1)
    ]
    best, best_state = -1.0, None
    for k in range(1, steps + 1):
        opt.zero_grad(set_to_none=True)
        _per_dataset_ce(model, splits).sum().backward()
        opt.step()
        if k % eval_every == 0 or k == steps:
            score = float(evaluate(model, data.val2, data.num_classes)["accuracy"].mean())
            if score > best:
                best, best_state = score, {n: t.clone() for n, t in model.state_dict().items()}
    model.load_state_dict(best_state)
    return model, evaluate(model, data.test, data.num_classes)
