"""MoDo (Chen, Fernando, Ying, Chen, "Three-Way Trade-Off in Multi-Objective Learning:
Optimization, Generalization and Conflict-Avoidance", NeurIPS 2023, arXiv 2305.20057).

Multi-objective gradient descent with double sampling: one projected step per call on the
weights of MGDA's (ρ-regularised) min-norm problem,

    λ ← Π_Δ(λ − γ (J₁ J₂ᵀ λ + ρ λ)),     d = Jᵀλ,

where J₁, J₂ are gradients on two independent samples, so that J₁J₂ᵀλ is an unbiased estimate
of J Jᵀλ. λ starts at 1/K and persists across calls. The step is on the RAW product (as the
paper and the authors' code), so γ must suit the gradients' scale.
"""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators._double_sampling import cross_gramian, direction, objectives
from morl.aggregators.base import Aggregator
from morl.solvers.simplex import project_simplex


class MoDo(Aggregator):
    """One MoDo λ step per call; λ is a buffer (``lam``).

    Options: ``gamma`` γ (0.1) and ``rho`` ρ (0.1), the defaults of the authors' LibMTL
    ``MoDo`` (and TorchJD's ``MoDoWeighting``); ``double_sampling`` (False: one [K, D] sample,
    A = J Jᵀ, a biased estimate; True: grads is [J₁; J₂], [2K, D], A = J₁J₂ᵀ, and d is taken on
    ½(J₁ + J₂); the authors' code sums the two, i.e. twice this d). ``weights`` = λ after the step.
    """

    def __init__(self, gamma: float = 0.1, rho: float = 0.1, double_sampling: bool = False, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        check_number("MoDo", "gamma", gamma, strict=True)
        check_number("MoDo", "rho", rho)
        check_choice("MoDo", "double_sampling", double_sampling, (True, False))
        self.gamma, self.rho = float(gamma), float(rho)
        self.double_sampling = bool(double_sampling)
        # with two samples d is ½[w, w]·[J₁; J₂], not weights @ grads: wrappers (CR-MOGM) refuse it
        self.direction_is_weighted = not self.double_sampling
        self.register_buffer("lam", None)

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        return torch.full_like(like, 1.0 / like.shape[0]) if name == "lam" else super()._initial_state(name, like)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        k = objectives(grads, self.double_sampling, "MoDo")
        # float64 on the K vector: γ A λ can be ~1e24 at large gradient scales
        a = cross_gramian(grads, self.double_sampling).to(torch.float64)
        lam = self._previous(k, a)
        lam = project_simplex(lam - self.gamma * (a @ lam + self.rho * lam))
        self.lam = lam.to(grads.dtype)
        self.weights = self.lam
        return direction(self.lam, grads, self.double_sampling)

    def _previous(self, k: int, like: torch.Tensor) -> torch.Tensor:
        if self.lam is None:
            return torch.full((k,), 1.0 / k, dtype=like.dtype, device=like.device)
        if self.lam.shape != (k,):
            raise ValueError(f"MoDo was stepped with K={self.lam.shape[0]} objectives, now got K={k}; call reset() first")
        return self.lam.to(like)

    def __repr__(self) -> str:
        return f"MoDo(gamma={self.gamma:g}, rho={self.rho:g}, double_sampling={self.double_sampling})"
