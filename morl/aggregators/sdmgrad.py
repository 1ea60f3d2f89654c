"""SDMGrad (Xiao, Ban, Ji, "Direction-oriented Multi-objective Learning: Simple and Provable
Stochastic Algorithms", NeurIPS 2023, arXiv 2305.18409).

MGDA's min-norm problem regularised toward a preferred direction g₀ = J w̃ (w̃ = 1/K: the mean):

    w* = argmin_{w∈Δ} ½‖Jᵀ(w + λ w̃)‖²,   d = Jᵀ(w* + λ w̃) / (1 + λ),

solved by projected stochastic steps w ← Π_Δ(w − η A (w + λ w̃)) with A = J₁J₂ᵀ from two
independent samples (Algorithm 1). As in the authors' code: A is divided by the square of the
mean row norm, the steps are SGD with momentum (η = 10, 0.5; the momentum restarts at every
call), ``n_steps`` = 20 per call, and w persists across calls (warm start).
"""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators._double_sampling import cross_gramian, direction, objectives
from morl.aggregators.base import Aggregator
from morl.solvers.simplex import project_simplex


def sdmgrad_steps(a: torch.Tensor, w: torch.Tensor, lam: float, lr: float, momentum: float, n_steps: int) -> torch.Tensor:
    """``n_steps`` projected heavy-ball steps on ½ wᵀA w + λ wᵀA w̃ (torch SGD's momentum rule)."""
    shift = lam * torch.full_like(w, 1.0 / w.shape[-1])
    velocity = torch.zeros_like(w)
    for step in range(n_steps):
        grad = a @ (w + shift)
        velocity = grad if step == 0 else momentum * velocity + grad
        w = project_simplex(w - lr * velocity)
    return w


def normalise(a: torch.Tensor) -> torch.Tensor:
    """A / s², s = mean_k sqrt(max(A_kk, 0)) (1 if 0): the step η then means the same at every
    gradient scale. The authors add 1e-4 under the root (TorchJD: 1e-8 to s²); absolute guards
    that freeze w for small gradients, so none is added here."""
    s = torch.diagonal(a).clamp_min(0.0).sqrt().mean()
    s2 = s * s
    return a / torch.where(s2 > torch.finfo(a.dtype).tiny, s2, torch.ones_like(s2))


class SDMGrad(Aggregator):
    """Stochastic direction-oriented multi-gradient: stateful simplex weights ``w`` (a buffer).

    Options: ``lam`` λ (0.3: the authors' experiments and LibMTL; their class default is 0.6),
    ``lr`` η (10), ``momentum`` (0.5), ``n_steps`` projected steps per call (20),
    ``double_sampling`` (False: A = J Jᵀ from the one [K, D] matrix; True: grads is [J₁; J₂],
    [2K, D], A = J₁J₂ᵀ and d is taken on ½(J₁ + J₂)). ``weights`` = (w + λ w̃)/(1 + λ).
    """

    def __init__(
        self, lam: float = 0.3, lr: float = 10.0, momentum: float = 0.5, n_steps: int = 20,
        double_sampling: bool = False, check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        check_number("SDMGrad", "lam", lam)
        check_number("SDMGrad", "lr", lr, strict=True)
        check_number("SDMGrad", "momentum", momentum)
        if momentum >= 1:
            raise ValueError(f"SDMGrad option momentum={momentum!r} is not valid; allowed: a number in [0, 1)")
        check_number("SDMGrad", "n_steps", n_steps, low=1, integer=True)
        check_choice("SDMGrad", "double_sampling", double_sampling, (True, False))
        self.lam, self.lr, self.momentum = float(lam), float(lr), float(momentum)
        self.n_steps = n_steps
        self.double_sampling = bool(double_sampling)
        # with two samples d is ½[w, w]·[J₁; J₂], not weights @ grads: wrappers (CR-MOGM) refuse it
        self.direction_is_weighted = not self.double_sampling
        self.register_buffer("w", None)

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        return torch.full_like(like, 1.0 / like.shape[0]) if name == "w" else super()._initial_state(name, like)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        k = objectives(grads, self.double_sampling, "SDMGrad")
        a = normalise(cross_gramian(grads, self.double_sampling).to(torch.float64))
        w = self._previous(k, a)
        w = sdmgrad_steps(a, w, self.lam, self.lr, self.momentum, self.n_steps)
        self.w = w.to(grads.dtype)
        weights = ((w + self.lam / k) / (1.0 + self.lam)).to(grads.dtype)
        self.weights = weights
        return direction(weights, grads, self.double_sampling)

    def _previous(self, k: int, like: torch.Tensor) -> torch.Tensor:
        if self.w is None:
            return torch.full((k,), 1.0 / k, dtype=like.dtype, device=like.device)
        if self.w.shape != (k,):
            raise ValueError(f"SDMGrad was stepped with K={self.w.shape[0]} objectives, now got K={k}; call reset() first")
        return self.w.to(like)

    def __repr__(self) -> str:
        return f"SDMGrad(lam={self.lam:g}, lr={self.lr:g}, momentum={self.momentum:g}, n_steps={self.n_steps})"
