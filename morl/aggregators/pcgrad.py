"""PCGrad (Yu et al. 2020): project away the conflicting components, then combine.

For each task i, in its own random order over j ≠ i:
    if g_i^PC · g_j < 0:  g_i^PC ← g_i^PC − (g_i^PC · g_j / ‖g_j‖²) g_j
(g_j is the ORIGINAL gradient, as in the paper), and d = mean_i g_i^PC (or the sum).

Every g_i^PC is a combination Σ_k C_ik g_k of the original rows, so the whole procedure runs
on the K×K Gramian: g_i^PC · g_j = (C G)_ij. The K task rows are processed together; the Python
loops are over the K positions in the random orders (5 small K×K tensor ops each; 1/‖g_j‖² of
every partner gathered once beforehand) and the K draws. K = 2 is a closed form.
"""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_choice
from morl.aggregators._seeded import SeededDraws
from morl.aggregators._host import gramian_rows, weights_tensor
from morl.aggregators.base import GramianAggregator

REDUCTIONS = ("mean", "sum")


class PCGrad(SeededDraws, GramianAggregator):
    """Projecting conflicting gradients.

    Options: ``seed`` (0) seeds the ``torch.Generator`` that draws the task orders, so runs are
    reproducible and the generator state is checkpointed. The orders are drawn on the
    Gramian's device (a CPU generator for CPU input, one generator per other device, seeded
    alike), so no call copies anything host→device;
    ``reduction`` "mean" (default; the scale of the mean loss) or "sum" (the paper's
    Algorithm 1 and the scale of the sum loss).
    """

    def __init__(self, seed: int = 0, reduction: str = "mean", check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self._init_seed("PCGrad", seed)
        check_choice("PCGrad", "reduction", reduction, REDUCTIONS)
        self.reduction = reduction

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        k = gram.shape[0]
        if k == 2 and (rows := gramian_rows(gram)) is not None:  # one small CPU Gramian, in Python floats
            w = _two_tasks_host(rows)
            return weights_tensor([x / k for x in w] if self.reduction == "mean" else w, gram)
        gram = gram.to(torch.float64)  # the projections subtract nearly equal numbers
        if k == 2:
            w = _two_tasks(gram)
            return w / k if self.reduction == "mean" else w
        orders = self._draw_orders(k, gram.device)
        partners = orders.T  # [position, task i]: the partner j of row i at that position
        # What does not depend on the running coefficients, gathered once: −1/‖g_j‖² for every
        # (position, i), 0 where j = i or g_j = 0 (no step there). G's partner rows are gathered
        # per position: all at once is a [K, K, K] copy (8 MB at K = 100), slower than K small ones.
        sq_norm = torch.diagonal(gram)[partners]
        step_ok = (sq_norm > torch.finfo(gram.dtype).tiny) & (partners != torch.arange(k, device=gram.device))
        neg_inv = (step_ok / torch.where(step_ok, -sq_norm, torch.ones_like(sq_norm))).unsqueeze(-1)
        index = partners.unsqueeze(-1)
        coef = torch.eye(k, dtype=gram.dtype, device=gram.device)  # row i: g_i^PC in the g basis
        for pos in range(k):
            dots = (coef * gram.index_select(0, partners[pos])).sum(-1, keepdim=True)  # (C G)_{i, j_i}
            # g_i^PC −= (dot / ‖g_j‖²) g_j only on a conflict (dot < 0)
            coef.scatter_add_(1, index[pos], dots.clamp_(max=0.0).mul_(neg_inv[pos]))
        w = coef.sum(0)
        return w / k if self.reduction == "mean" else w

    def _draw_orders(self, k: int, device: torch.device = torch.device("cpu")) -> torch.Tensor:
        # One independent permutation of the K tasks per row, as the reference code shuffles
        # the task list anew for every g_i, drawn where they are used (no host→device copy).
        # K randperm calls rather than one batched argsort, whose multi-threaded sort stalls
        # badly on a loaded CPU (95 ms vs ~1 ms for K = 200 measured here).
        gen = self._generator_for(device)
        return torch.stack([torch.randperm(k, generator=gen, device=device) for _ in range(k)])

    def __repr__(self) -> str:
        return f"PCGrad(seed={self.seed}, reduction={self.reduction!r})"


def _two_tasks(gram: torch.Tensor) -> torch.Tensor:
    """K = 2: each row's only partner is the other (original) row, so the orders do not matter
    and none is drawn. On a conflict g_1^PC = g_1 − (g_12/‖g_2‖²) g_2 and g_2^PC = g_2 −
    (g_12/‖g_1‖²) g_1, so g_1^PC + g_2^PC has weights w_k = 1 − g_12/‖g_k‖² (1 where g_k = 0)."""
    sq_norm = torch.diagonal(gram)
    usable = sq_norm > torch.finfo(gram.dtype).tiny
    return 1.0 - gram[0, 1].clamp(max=0.0) * usable / torch.where(usable, sq_norm, torch.ones_like(sq_norm))


def _two_tasks_host(gram: list[list[float]]) -> list[float]:
    """:func:`_two_tasks` for a finite Gramian held as Python floats (float64 arithmetic)."""
    conflict = min(gram[0][1], 0.0)
    tiny = torch.finfo(torch.float64).tiny
    return [1.0 - (conflict / gram[i][i] if gram[i][i] > tiny else 0.0) for i in range(2)]
