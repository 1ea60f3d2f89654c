"""MoDo (Chen, Fernando, Ying, Chen, NeurIPS 2023, arXiv 2305.20057): one projected step per call on
MGDA's ρ-regularised weights with double sampling, λ ← Π_Δ(λ − γ (J₁J₂ᵀλ + ρλ)), d = Jᵀλ,
λ⁰ = 1/K. The step is on the raw product (as the authors' code): γ must suit the gradients' scale.
"""

import torch

from morl.aggregators._checks import check_number
from morl.aggregators._double_sampling import DoubleSampling
from morl.aggregators.base import Aggregator
from morl.solvers.simplex import project_simplex


class MoDo(DoubleSampling, Aggregator):
    """One MoDo step per call; λ is the buffer ``lam``. Options: ``gamma`` γ (0.1) and ``rho`` ρ
    (0.1), LibMTL's and TorchJD's defaults; ``double_sampling`` (False; True: grads is [J₁; J₂]
    and d is taken on ½(J₁ + J₂), half the authors' d)."""

    _WEIGHTS = "lam"
    _STATE = _UNIFORM = ("lam",)
    _REPR = ("gamma", "rho", "double_sampling")

    def __init__(
        self, gamma: float = 0.1, rho: float = 0.1, double_sampling: bool = False, check_finite: str = "raise"
    ) -> None:
        super().__init__(check_finite=check_finite)
        self.gamma = check_number("MoDo", "gamma", gamma, strict=True)
        self.rho = check_number("MoDo", "rho", rho)
        self._init_sampling(double_sampling)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        a = self._cross_gramian(grads)  # float64: γAλ can be ~1e24 at large gradient scales
        lam = self._previous(a)
        self.lam = project_simplex(lam - self.gamma * (a @ lam + self.rho * lam)).to(grads.dtype)
        self.weights = self.lam
        return self._direction(self.lam, grads)
