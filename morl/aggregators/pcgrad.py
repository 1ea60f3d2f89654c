"""PCGrad (Yu et al., NeurIPS 2020, arXiv 2001.06782, Algorithm 1): for each task i, in its own
random order over the tasks j ≠ i (g_j the original gradients),

    if g_i^PC · g_j < 0:  g_i^PC ← g_i^PC − (g_i^PC · g_j / ‖g_j‖²) g_j,      d = Σ_i g_i^PC (or the mean).

Every g_i^PC = Σ_k C_ik g_k, so it runs on the K×K Gramian, all tasks at once.
"""

import torch

from morl.aggregators._checks import check_choice
from morl.aggregators._seeded import SeededDraws
from morl.aggregators.base import GramianAggregator

REDUCTIONS = ("mean", "sum")


class PCGrad(SeededDraws, GramianAggregator):
    """Projecting conflicting gradients. Options: ``seed`` (0; the task orders, one
    ``randperm(K)`` per task and call, as TorchJD), ``reduction`` "mean" (default) or "sum"
    (the paper's Algorithm 1)."""

    _REPR = ("seed", "reduction")

    def __init__(self, seed: int = 0, reduction: str = "mean", check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self._init_seed(type(self).__name__, seed)
        check_choice(type(self).__name__, "reduction", reduction, REDUCTIONS)
        self.reduction = reduction

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        k = gram.shape[0]
        gram = gram.to(torch.float64)  # the projections subtract nearly equal numbers
        tasks = torch.arange(k, device=gram.device)
        partners = self._draw_orders(k, gram.device).T  # [position, i]: row i's partner j there
        sq_norm = torch.diagonal(gram)[partners]
        projects = (sq_norm > torch.finfo(gram.dtype).tiny) & (partners != tasks)  # no step onto g_i or 0
        inv_sq_norm = projects / torch.where(projects, sq_norm, 1.0)
        coef = torch.eye(k, dtype=gram.dtype, device=gram.device)  # row i: g_i^PC in the g basis
        for j, inv in zip(partners, inv_sq_norm):
            dots = (coef * gram[j]).sum(-1)  # g_i^PC · g_j for every i
            coef = coef.index_put((tasks, j), coef[tasks, j] - dots.clamp(max=0.0) * inv)
        w = coef.sum(0)
        return w / k if self.reduction == "mean" else w

    def _draw_orders(self, k: int, device: torch.device) -> torch.Tensor:
        """[K, K]: row i is task i's order over all K tasks (itself included, and skipped)."""
        gen = self._generator_for(device)
        return torch.stack([torch.randperm(k, generator=gen, device=device) for _ in range(k)])
