"""SDMGrad (Xiao, Ban, Ji, NeurIPS 2023, arXiv 2305.18409, Algorithm 1): MGDA regularised toward the
mean direction, w* = argmin_{w∈Δ} ½‖Jᵀ(w + λ/K)‖², d = Jᵀ(w* + λ/K) / (1 + λ), by projected
steps w ← Π_Δ(w − η A (w + λ/K)), A = J₁J₂ᵀ. As the authors' code: A ÷ (mean row norm)², SGD
with momentum restarted per call, w warm-started across calls.
"""

import torch

from morl.aggregators._checks import check_number
from morl.aggregators._double_sampling import DoubleSampling
from morl.aggregators.base import Aggregator
from morl.solvers.simplex import project_simplex


def sdmgrad_steps(
    a: torch.Tensor, w: torch.Tensor, lam: float, lr: float, momentum: float, n_steps: int
) -> torch.Tensor:
    """``n_steps`` projected heavy-ball steps on ½ wᵀAw + (λ/K) wᵀA1 (torch SGD's momentum rule)."""
    shift = lam * torch.full_like(w, 1.0 / w.shape[-1])
    velocity = torch.zeros_like(w)
    for _ in range(n_steps):
        velocity = momentum * velocity + a @ (w + shift)
        w = project_simplex(w - lr * velocity)
    return w


def normalise(a: torch.Tensor) -> torch.Tensor:
    """A / s², s = mean_k sqrt(A_kk) (1 if 0); no absolute guard (the authors' 1e-4 freezes w)."""
    s2 = torch.diagonal(a).clamp_min(0.0).sqrt().mean().square()
    return a / torch.where(s2 > torch.finfo(a.dtype).tiny, s2, 1.0)


class SDMGrad(DoubleSampling, Aggregator):
    """SDMGrad; the simplex weights ``w`` are a buffer, ``weights`` = (w + λ/K)/(1 + λ).
    Options: ``lam`` λ (0.3, the authors' experiments), ``lr`` η (10), ``momentum`` (0.5),
    ``n_steps`` (20), ``double_sampling`` (False)."""

    _STATE = _UNIFORM = ("w",)
    _REPR = ("lam", "lr", "momentum", "n_steps")

    def __init__(
        self,
        lam: float = 0.3,
        lr: float = 10.0,
        momentum: float = 0.5,
        n_steps: int = 20,
        double_sampling: bool = False,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self.lam = check_number("SDMGrad", "lam", lam)
        self.lr = check_number("SDMGrad", "lr", lr, strict=True)
        self.momentum = check_number("SDMGrad", "momentum", momentum, high=1.0, below=True)
        self.n_steps = check_number("SDMGrad", "n_steps", n_steps, low=1, integer=True)
        self._init_sampling(double_sampling)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        a = normalise(self._cross_gramian(grads))
        w = sdmgrad_steps(a, self._previous(a), self.lam, self.lr, self.momentum, self.n_steps)
        self.w = w.to(grads.dtype)
        self.weights = ((w + self.lam / a.shape[0]) / (1.0 + self.lam)).to(grads.dtype)
        return self._direction(self.weights, grads)
