"""Metrics for multi-solution learning (MosT paper, §6.1–6.2): best-model selection, tail accuracy,
hypervolume and solution diversity. Pure torch; inputs may live on any device.

* :func:`select_best` / :func:`picked_accuracy` — each objective picks its best model on
  validation and reports that model's test value ("valbest"); ``oracle`` picks on test.
* :func:`tail_means` — mean of the worst q-fraction of objectives (worst 20/40/60/80 %).
* :func:`hypervolume` — exact dominated volume for minimisation (``morl.metrics.pareto``'s).
* :func:`prediction_diversity` — mean pairwise symmetric KL between the models' predictions.
* :func:`plan_sparsity`, :func:`column_cosine` — transport-plan diagnostics (Def. 1).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from morl.metrics.pareto import hypervolume as pareto_hypervolume

TAIL_FRACTIONS = (0.2, 0.4, 0.6, 0.8)


def select_best(val_scores: torch.Tensor, higher_is_better: bool = True) -> torch.Tensor:
    """Index ``[n]`` of the best model per objective from scores ``[m, n]``."""
    if val_scores.dim() != 2:
        raise ValueError(f"scores must have shape [m, n], got {tuple(val_scores.shape)}")
    return val_scores.argmax(0) if higher_is_better else val_scores.argmin(0)


def picked_accuracy(test_acc: torch.Tensor, val_acc: torch.Tensor | None = None) -> torch.Tensor:
    """Per-objective test accuracy ``[n]`` of the model chosen on ``val_acc`` (oracle if None)."""
    choice = select_best(test_acc if val_acc is None else val_acc)
    return test_acc.gather(0, choice.unsqueeze(0)).squeeze(0)


def tail_means(
    values: torch.Tensor, fractions: Sequence[float] = TAIL_FRACTIONS, higher_is_better: bool = True
) -> dict[str, torch.Tensor]:
    """``{"mean": …, "worst20": …, …}``: mean over all, and over the worst ⌈q·n⌉ objectives."""
    values = values.reshape(-1)
    n = values.numel()
    if n == 0:
        raise ValueError("tail_means needs at least one value")
    ordered = torch.sort(values, descending=not higher_is_better).values
    out = {"mean": values.mean()}
    for q in fractions:
        if not 0 < q <= 1:
            raise ValueError(f"tail fractions must be in (0, 1], got {q}")
        k = max(1, int(round(q * n)))
        out[f"worst{int(round(q * 100))}"] = ordered[:k].mean()
    return out


def hypervolume(points: torch.Tensor, reference: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """Volume of ``{q : ∃p ∈ points, p ≤ q ≤ r}`` (minimisation) for ``points [k, d]``: the exact
    :func:`morl.metrics.pareto.hypervolume` with ``maximize=False``."""
    return pareto_hypervolume(points, reference, maximize=False)


def prediction_diversity(probs: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Mean over model pairs ``j ≠ z`` of the symmetric KL of predictions ``probs [m, N, C]``.

    ``½(KL(p_j‖p_z) + KL(p_z‖p_j))`` averaged over the N samples; probabilities are floored at
    ``eps`` (the paper leaves its smoothing unstated).
    """
    if probs.dim() != 3 or probs.shape[0] < 2:
        raise ValueError(f"probs must have shape [m >= 2, N, C], got {tuple(probs.shape)}")
    p = probs.clamp_min(eps)
    p = p / p.sum(-1, keepdim=True)
    logp = p.log()
    # KL(p_j‖p_z) = Σ p_j log p_j − Σ p_j log p_z, for all pairs at once.
    self_term = (p * logp).sum(-1)  # [m, N]
    cross = torch.einsum("jnc,znc->jzn", p, logp)  # [m, m, N]
    kl = self_term.unsqueeze(1) - cross
    sym = 0.5 * (kl + kl.transpose(0, 1)).mean(-1)
    m = probs.shape[0]
    return (sym.sum() - sym.diagonal().sum()) / (m * (m - 1))


def plan_sparsity(plan: torch.Tensor, threshold: float = 1e-8) -> torch.Tensor:
    """Fraction of entries of ``plan`` at most ``threshold · sum(plan)``."""
    return (plan <= threshold * plan.sum()).to(torch.float64).mean()


def column_cosine(plan: torch.Tensor) -> torch.Tensor:
    """Σ_{j≠z} cos(Γ_{·j}, Γ_{·z}) — the paper's diversity measure (Def. 1); 0 for disjoint columns."""
    cols = plan / plan.norm(dim=0, keepdim=True).clamp_min(torch.finfo(plan.dtype).tiny)
    cos = cols.T @ cols
    return cos.sum() - cos.diagonal().sum()


__all__ = [
    "TAIL_FRACTIONS",
    "select_best",
    "picked_accuracy",
    "tail_means",
    "hypervolume",
    "prediction_diversity",
    "plan_sparsity",
    "column_cosine",
]
