"""GradVac (Wang et al., ICLR 2021, arXiv 2010.05874, Algorithm 1): PCGrad towards a target cosine.
For each task i, in its own random order over j ≠ i, with φ = cos(g_i^PS, g_j):

    if φ < φ̂_ij:  g_i^PS ← g_i^PS + ‖g_i^PS‖ (φ̂_ij √(1−φ²) − φ √(1−φ̂_ij²)) / (‖g_j‖ √(1−φ̂_ij²)) · g_j
    φ̂_ij ← (1 − β) φ̂_ij + β φ                                    (eq. 3)

d = mean_i g_i^PS (or the sum); φ̂⁰ = 0. On the whole gradient (the paper: per layer), on the Gramian.
"""

import torch

from morl.aggregators._checks import check_number
from morl.aggregators.pcgrad import PCGrad

#: floor on √(1 − φ̂²): a target of ±1 would ask for an infinite correction
SIN_FLOOR = 1e-8


class GradVac(PCGrad):
    """Gradient vaccine; the K×K target cosines φ̂ are the buffer ``targets``.

    Options: ``beta`` (0.01, the paper's EMA rate), ``seed`` (0; the task orders, drawn as
    TorchJD), ``reduction`` "mean" (default) or "sum" (the paper, TorchJD, LibMTL).
    """

    _STATE = ("targets",)  # φ̂^(0) = 0 (Algorithm 1)
    _REPR = ("beta", "seed", "reduction")

    def __init__(self, beta: float = 0.01, seed: int = 0, reduction: str = "mean", check_finite: str = "raise") -> None:
        super().__init__(seed=seed, reduction=reduction, check_finite=check_finite)
        self.beta = check_number("GradVac", "beta", beta, high=1.0)

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        k = gram.shape[0]
        gram = gram.to(torch.float64)
        targets = self._get("targets", gram)
        orders = self._draw_orders(k, gram.device)
        coef = torch.eye(k, dtype=gram.dtype, device=gram.device)  # row i: g_i^PS in the g basis
        rows = torch.arange(k, device=gram.device)
        sq_norm = torch.diagonal(gram).clamp(min=0.0)
        own = sq_norm  # ‖g_i^PS‖², updated in closed form
        tiny = torch.finfo(gram.dtype).tiny
        for pos in range(k - 1):
            j = orders[:, pos]
            dots = (coef * gram.index_select(0, j)).sum(-1)  # g_i^PS · g_j
            norm_j = sq_norm.index_select(0, j)
            defined = (norm_j > tiny) & (own > tiny)  # else the cosine counts as 0, as TorchJD's eps makes it
            phi = torch.where(defined, dots / torch.where(defined, (own * norm_j).sqrt(), 1.0), 0.0).clamp(-1.0, 1.0)
            target = targets[rows, j]
            sin = (1.0 - phi * phi).clamp(min=0.0).sqrt()
            sin_t = (1.0 - target * target).clamp(min=0.0).sqrt().clamp(min=SIN_FLOOR)
            fix = defined & (phi < target)
            safe_j = torch.where(fix, norm_j, 1.0).sqrt()
            step = torch.where(fix, own.sqrt() * (target * sin - phi * sin_t) / (safe_j * sin_t), 0.0)
            coef = coef.index_put((rows, j), coef[rows, j] + step)
            # ‖g_i^PS‖² × (1 − φ²)/(1 − φ̂²) in closed form: recomputing it from coef cancels badly
            own = torch.where(fix, own * (sin * sin) * (target * target + sin_t * sin_t) / (sin_t * sin_t), own)
            targets = targets.index_put((rows, j), (1.0 - self.beta) * target + self.beta * phi)
        self.targets = targets.detach()  # state must not hold the autograd graph of past calls
        w = coef.sum(0)
        return w / k if self.reduction == "mean" else w

    def _draw_orders(self, k: int, device: torch.device) -> torch.Tensor:
        """[K, K − 1]: row i a random order of the tasks j ≠ i, one ``randperm(K − 1)`` each (TorchJD's)."""
        gen = self._generator_for(device)
        perms = torch.stack([torch.randperm(k - 1, generator=gen, device=device) for _ in range(k)])
        return perms + (perms >= torch.arange(k, device=device).unsqueeze(1)).to(perms.dtype)
