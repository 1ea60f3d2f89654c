"""GradNorm (Chen, Badrinarayanan, Lee, Rabinovich, ICML 2018, arXiv 1711.02257, Algorithm 1).

Loss weights w (Σ w = K, w(0) = 1) are trained so that G_k = ‖w_k g_k‖ tracks Ḡ r_k^α:

    L_grad = Σ_k |G_k − Ḡ r_k^α|,  Ḡ = mean_k G_k,  r_k = L̃_k / mean_j L̃_j,  L̃_k = L_k / L_k(0).

Each call returns d = Σ_k w_k g_k with the current w, then takes one Adam step of w on
∂L_grad/∂w_k (target held constant), clips w at 0 and renormalises to Σ w = K. The paper takes
g_k at the last shared layer only: pass those rows, or the full [K, D] matrix.
"""

import torch

from morl.aggregators._adam import adam_step
from morl.aggregators._checks import check_number
from morl.aggregators.loss_weighting import LossWeighting


class GradNorm(LossWeighting):
    """GradNorm. Options: ``alpha`` (1.5, the restoring force), ``lr`` (0.025, Adam's on w).
    State: ``w``, Adam's ``m``, ``v``, ``step``, ``initial`` (L(0)) and ``started``."""

    needs_grads = True
    _STATE = ("w", "m", "v", "step", "initial", "started")
    _REPR = ("alpha", "lr")

    def __init__(self, alpha: float = 1.5, lr: float = 0.025, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self.alpha = check_number("GradNorm", "alpha", alpha)
        self.lr = check_number("GradNorm", "lr", lr)

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(like) if name == "w" else torch.zeros_like(like)

    def weighted_loss(self, losses: torch.Tensor) -> torch.Tensor:
        raise TypeError("GradNorm needs the per-task gradient norms: call it on the [K, D] matrix, agg(grads, losses)")

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        norms = torch.linalg.vector_norm(grads, dim=1)  # O(KD): no Gramian needed
        w = self._get("w", norms)
        self._train_weights(w, norms, losses.to(grads.dtype))
        self.weights = w
        return w @ grads

    def _train_weights(self, w: torch.Tensor, norms: torch.Tensor, losses: torch.Tensor) -> None:
        started = self._flag("started", losses)
        initial = torch.where(started, self._get("initial", losses), losses)
        tiny = torch.finfo(losses.dtype).tiny
        ratio = torch.where(initial.abs() > tiny, losses / torch.where(initial.abs() > tiny, initial, 1.0), 1.0)
        ratio = ratio.clamp_min(0.0)  # a loss that changed sign: no restoring force (r^α needs r ≥ 0)
        mean = ratio.mean()
        r = torch.where(mean > tiny, ratio / mean.clamp_min(tiny), 1.0)
        g = w.abs() * norms
        target = g.mean() * r.pow(self.alpha)
        grad = torch.sign(g - target) * norms  # ∂/∂w_k of Σ|w_k‖g_k‖ − target_k| for w_k ≥ 0
        new, self.m, self.v, self.step = adam_step(
            w, grad, self._get("m", w), self._get("v", w), self._count("step", w), self.lr
        )
        new = new.clamp_min(0.0)
        total = new.sum()
        k = w.shape[0]
        self.w = torch.where(total > 0, k * new / total.clamp_min(tiny), 1.0)
        self.initial, self.started = initial, torch.ones((), dtype=torch.bool, device=losses.device)
