"""Server-side aggregation: ``(deltas [m, n, P], losses [m, n], sizes [n]) -> updates [m, P]``.

Every strategy keeps m global models (m independent runs for the single-model baselines, as in
the MosT paper) and subtracts the returned update: ``θ_j ← θ_j − update_j``.

* ``fedavg``: ``Σ_i p_i Δ_ij`` with ``p_i ∝`` client sample counts (McMahan et al. 2017).
* ``fedprox``: FedAvg aggregation; clients add ``(μ/2)‖θ − θ_global‖²`` (Li et al. 2020).
* ``fedmgda``: FedMGDA+ (Hu et al. 2022): λ = argmin ‖Σ λ_i Δ̂_i‖² over the simplex with
  ``|λ_i − 1/n| ≤ ε`` (Δ̂ = unit-norm deltas), update ``Σ λ_i Δ_i``.
* ``mgda``: MGDA over all clients (min-norm λ on the simplex, raw deltas), one run per model.
* ``linearization``: fixed random simplex weights per (model, client).
* ``most``: MosT — Γ from :meth:`morl.most.MosT.assign` on the ``[m, n]`` losses, then the
  Γ-weighted MGDA direction per model (:meth:`morl.most.MosT.directions`); FedAvg for the
  first ``warmup_rounds`` rounds (as in the official code). ``combine="linear"`` is the
  paper's ablation MosT (L): the Γ-weighted average of the deltas instead of MGDA.
  ``combine="switch"`` is the official code's rule (spec §11.1, §11.3 item 5): with
  ``S = Σ_ij Γ_ij L_ij`` and its running average ``avg_S`` (EMA 0.95, starting at 0 and set to
  the first S), take the MGDA step when ``S < avg_S`` and the linear step otherwise.
"""

from __future__ import annotations

import torch

from morl.most import MosT
from morl.solvers.min_norm import min_norm

NAMES = ("fedavg", "fedprox", "fedmgda", "mgda", "linearization", "most")


def _sample_weights(sizes: torch.Tensor, dtype) -> torch.Tensor:
    s = sizes.to(dtype)
    return s / s.sum()


class FedAvg:
    name = "fedavg"

    def aggregate(self, deltas: torch.Tensor, losses: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        return torch.einsum("i,jip->jp", _sample_weights(sizes, deltas.dtype), deltas)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class FedProx(FedAvg):
    """FedAvg on the server; the proximal term lives in the client update (``prox_mu``)."""

    name = "fedprox"


def box_simplex_min_norm(gram: torch.Tensor, lo: float, hi: float, iters: int = 300) -> torch.Tensor:
    """argmin_λ λᵀGλ over ``{λ ∈ Δ_n, lo ≤ λ_i ≤ hi}`` for ``gram [..., n, n]`` (projected gradient).

    The projection onto the capped simplex is ``clamp(v − t, lo, hi)`` with ``t`` found by
    bisection so the sum is 1; fixed iteration counts, no host synchronisation.
    """
    n = gram.shape[-1]
    g = gram / torch.diagonal(gram, dim1=-2, dim2=-1).amax(-1, keepdim=True).unsqueeze(-1).clamp_min(1e-30)
    step = 1.0 / g.abs().sum(-1).amax(-1, keepdim=True).clamp_min(1e-30)  # ≤ 1/λ_max (row-sum bound)

    def project(v):
        low = (v - hi).amin(-1, keepdim=True) - 1.0
        high = (v - lo).amax(-1, keepdim=True) + 1.0
        for _ in range(60):
            mid = 0.5 * (low + high)
            too_big = torch.clamp(v - mid, lo, hi).sum(-1, keepdim=True) > 1
            low, high = torch.where(too_big, mid, low), torch.where(too_big, high, mid)
        return torch.clamp(v - 0.5 * (low + high), lo, hi)

    lam = torch.full(gram.shape[:-1], 1.0 / n, dtype=gram.dtype, device=gram.device)
    for _ in range(iters):
        lam = project(lam - step * (g @ lam.unsqueeze(-1)).squeeze(-1))
    return lam


class FedMGDA(FedAvg):
    """FedMGDA+ with the ε-box around uniform weights."""

    name = "fedmgda"

    def __init__(self, eps: float = 0.5) -> None:
        if not 0 <= eps <= 1:
            raise ValueError(f"fedmgda eps must be in [0, 1], got {eps}")
        self.eps = eps

    def aggregate(self, deltas, losses, sizes):
        n = deltas.shape[1]
        unit = deltas / deltas.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        gram = torch.einsum("jip,jkp->jik", unit, unit).to(torch.float64)
        lam = box_simplex_min_norm(gram, max(0.0, 1.0 / n - self.eps), min(1.0, 1.0 / n + self.eps))
        return torch.einsum("ji,jip->jp", lam.to(deltas.dtype), deltas)


class MGDA(FedAvg):
    """Plain MGDA over all n clients (min-norm point of the raw deltas), per model."""

    name = "mgda"

    def aggregate(self, deltas, losses, sizes):
        gram = torch.einsum("jip,jkp->jik", deltas, deltas)
        lam = min_norm(gram)
        return torch.einsum("ji,jip->jp", lam.to(deltas.dtype), deltas)


class Linearization(FedAvg):
    """Fixed random convex weights ``w_j ∈ Δ^n`` per model (softmax of N(0, 1) draws)."""

    name = "linearization"

    def __init__(self, num_models: int, num_clients: int, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.weights = torch.softmax(torch.randn(num_models, num_clients, generator=gen), dim=-1)

    def aggregate(self, deltas, losses, sizes):
        return torch.einsum("ji,jip->jp", self.weights.to(deltas), deltas)


class MosTStrategy(FedAvg):
    """MosT aggregation (Algorithm 1 with client pseudo-gradients as the gradients)."""

    name = "most"

    COMBINES = ("mgda", "linear", "switch")
    EMA = 0.95  # avg_S ← 0.95 avg_S + 0.05 S, as in the official federated_moo.py

    def __init__(self, most: MosT, warmup_rounds: int = 3, combine: str = "mgda") -> None:
        if combine not in self.COMBINES:
            raise ValueError(f"combine={combine!r} is not valid; allowed: {', '.join(self.COMBINES)}")
        self.most = most
        self.warmup_rounds = warmup_rounds
        self.combine = combine
        self.rounds_done = 0
        self.avg_objective = 0.0  # avg_S of the switching rule; 0 means "no MosT round yet"
        self.branches: list[str] = []  # branch taken in each MosT round (for logs and tests)

    def aggregate(self, deltas, losses, sizes):
        self.rounds_done += 1
        if self.rounds_done <= self.warmup_rounds:
            return super().aggregate(deltas, losses, sizes)
        gamma = self.most.assign(losses)
        branch = self._switch(gamma, losses) if self.combine == "switch" else self.combine
        self.branches.append(branch)
        if branch == "linear":
            # MosT (L): Γ-weighted FedAvg, each column normalised to sum 1.
            w = gamma.T / gamma.sum(0).unsqueeze(-1).clamp_min(1e-30)
            update = torch.einsum("ji,jip->jp", w.to(deltas.dtype), deltas)
        else:
            update = self.most.directions(deltas, gamma)
        self.most.step_curriculum()
        return update

    def _switch(self, gamma: torch.Tensor, losses: torch.Tensor) -> str:
        """The official code's test: MGDA if ``S = Σ_ij Γ_ij L_ij`` is below its running average.

        One host read per server round (not a hot path). As in the code, the first MosT round
        compares with 0 (so it is linear) and then sets ``avg_S = S``.
        """
        s = float((gamma.to(losses.dtype) * losses.T).sum())
        branch = "mgda" if s < self.avg_objective else "linear"
        first = self.avg_objective == 0.0
        self.avg_objective = s if first else self.EMA * self.avg_objective + (1 - self.EMA) * s
        return branch

    def state_dict(self) -> dict:
        cur = self.most.curriculum
        return {"rounds_done": self.rounds_done, "gamma": self.most.gamma, "avg_objective": self.avg_objective,
                "curriculum": None if cur is None else cur.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.rounds_done = int(state["rounds_done"])
        self.most.gamma = state["gamma"]
        self.avg_objective = float(state.get("avg_objective", 0.0))
        if self.most.curriculum is not None and state.get("curriculum") is not None:
            self.most.curriculum.load_state_dict(state["curriculum"])
