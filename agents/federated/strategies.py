"""Server-side aggregation: ``(deltas [m, n, P], losses [m, n], sizes [n]) -> updates [m, P]``.

Every strategy keeps m global models (m independent runs for the single-model baselines, as in
the MosT paper) and subtracts the returned update: ``θ_j ← θ_j − update_j``.

* ``fedavg``: ``Σ_i p_i Δ_ij`` with ``p_i ∝`` client sample counts (McMahan et al. 2017).
* ``fedprox``: FedAvg aggregation; clients add ``(μ/2)‖θ − θ_global‖²`` (Li et al. 2020).
* ``fedmgda``: FedMGDA+ (Hu et al. 2022): λ = argmin ‖Σ λ_i Δ̂_i‖² over the simplex with
  ``|λ_i − 1/n| ≤ ε`` (Δ̂ = unit-norm deltas), update ``Σ λ_i Δ_i``.
* ``mgda``: MGDA over all clients (min-norm λ on the simplex, raw deltas), one run per model.
* ``linearization``: fixed random simplex weights per (model, client).
* ``krum`` / ``trimmed_mean``: the morl robust aggregator over each model's n client deltas,
  for up to ``n_byzantine`` arbitrary clients (Blanchard et al. 2017; Yin et al. 2018).
* ``most``: MosT — Γ from :meth:`morl.most.MosT.assign` on the ``[m, n]`` losses, then the
  Γ-weighted MGDA direction per model (:meth:`morl.most.MosT.directions`); FedAvg for the
  first ``warmup_rounds`` rounds (as in the official code). ``combine="linear"`` is the
  paper's ablation MosT (L): the Γ-weighted average of the deltas instead of MGDA.
  ``combine="switch"`` is the official code's rule (tianyi-lab/MosT ``federated_moo.py``; the paper
  does not describe it): with
  ``S = Σ_ij Γ_ij L_ij`` and its running average ``avg_S`` (EMA 0.95, starting at 0 and set to
  the first S), take the MGDA step when ``S < avg_S`` and the linear step otherwise. The rest of
  the official code's round (pair sampling with stale deltas, Γ moving average, OT re-solve;
  ``federated_moo.py``, none of them in the paper) are options of :class:`MosTStrategy`; the
  last-epoch losses are a client option
  (:data:`morl.agents.federated.client.LOSS_SOURCES`).
"""

from __future__ import annotations

import torch

from morl.aggregators import build
from morl.most import MosT
from morl.solvers.min_norm import min_norm

NAMES = ("fedavg", "fedprox", "fedmgda", "mgda", "linearization", "most", "krum", "trimmed_mean")


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


class Robust(FedAvg):
    """Krum or the trimmed mean (``morl.aggregators``) over the n deltas of each model. Sample
    counts are not used: a Byzantine client could report any count."""

    OPTION = {"krum": "n_byzantine", "trimmed_mean": "trim"}

    def __init__(self, name: str, n_byzantine: int, num_clients: int) -> None:
        need = 2 * n_byzantine + (3 if name == "krum" and n_byzantine else 1)
        if num_clients < need:
            raise ValueError(f"{name} with n_byzantine={n_byzantine} needs at least {need} clients, got {num_clients}")
        self.name = name
        self.aggregator = build(name, **{self.OPTION[name]: n_byzantine})

    def aggregate(self, deltas, losses, sizes):
        return torch.stack([self.aggregator(d) for d in deltas])  # a loop over the m models


class MosTStrategy(FedAvg):
    """MosT aggregation (Algorithm 1 with client pseudo-gradients as the gradients).

    The official code's round (tianyi-lab/MosT ``federated_moo.py`` + ``update.py``; its extras are not
    in the paper) is available through options; their
    defaults reproduce the plain round exactly:

    * ``sample_fraction`` (1.0): after the first MosT round only ``max(⌊f·m·n⌋, 1)`` (model, client)
      pairs, drawn uniformly without replacement from ``(seed, round)``, are trained; the other
      pairs reuse their last (stale) deltas and losses, cached on the data's device.
    * ``gamma_momentum`` (0 = off) / ``gamma_average``: the plan used by the MGDA step is a moving
      average Γ̄ of the plans, ``Γ̄ ← μ Γ̄ + (1−μ) Γ`` ("ema") or the running mean of every plan
      since averaging started ("cumulative", the code's ``ot_ma``); averaging starts at the
      ``gamma_average_start``-th plan (the code's ``sma_start_iter``). Before that Γ̄ = Γ.
    * ``ot_resolve`` (0 = off): in the MGDA branch, the code's ``ot_iter`` loop — predict the
      losses after the step, ``L̃_ij = L_ij + max_i' Δ_i'j·Δθ_j + ½‖Δθ_j‖``, re-solve the OT on
      them with the round's marginals, fold the new plan into Γ̄, recompute the step; repeated
      ``ot_resolve`` times (the last plan only feeds Γ̄, the warm start and avg_S).
    """

    name = "most"

    COMBINES = ("mgda", "linear", "switch")
    GAMMA_AVERAGES = ("ema", "cumulative")
    EMA = 0.95  # avg_S ← 0.95 avg_S + 0.05 S, as in the official federated_moo.py

    def __init__(
        self,
        most: MosT,
        warmup_rounds: int = 3,
        combine: str = "mgda",
        sample_fraction: float = 1.0,
        gamma_momentum: float = 0.0,
        gamma_average: str = "ema",
        gamma_average_start: int = 0,
        ot_resolve: int = 0,
        seed: int = 0,
    ) -> None:
        if combine not in self.COMBINES:
            raise ValueError(f"combine={combine!r} is not valid; allowed: {', '.join(self.COMBINES)}")
        if not 0.0 < sample_fraction <= 1.0:
            raise ValueError(f"sample_fraction must be in (0, 1], got {sample_fraction}")
        if not 0.0 <= gamma_momentum < 1.0:
            raise ValueError(f"gamma_momentum must be in [0, 1), got {gamma_momentum}")
        if gamma_average not in self.GAMMA_AVERAGES:
            raise ValueError(f"gamma_average={gamma_average!r} is not valid; allowed: {', '.join(self.GAMMA_AVERAGES)}")
        if gamma_average == "cumulative" and gamma_momentum != 0.0:
            raise ValueError(
                "gamma_momentum applies to gamma_average=ema only; leave it 0 with gamma_average=cumulative"
            )
        for name, value in (
            ("warmup_rounds", warmup_rounds),
            ("gamma_average_start", gamma_average_start),
            ("ot_resolve", ot_resolve),
        ):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        self.most = most
        self.warmup_rounds = warmup_rounds
        self.combine = combine
        self.sample_fraction, self.seed = float(sample_fraction), int(seed)
        self.gamma_momentum, self.gamma_average = float(gamma_momentum), gamma_average
        self.gamma_average_start, self.ot_resolve = int(gamma_average_start), int(ot_resolve)
        self.rounds_done = 0
        self.avg_objective = 0.0  # avg_S of the switching rule; 0 means "no MosT round yet"
        self.branches: list[str] = []  # branch taken in each MosT round (for logs and tests)
        self.cache_deltas: torch.Tensor | None = None  # [m, n, P] last delta of every pair
        self.cache_losses: torch.Tensor | None = None  # [m, n]
        self.gamma_avg: torch.Tensor | None = None  # Γ̄ [n, m]
        self.gamma_updates = 0  # plans folded into Γ̄ so far (the code's update_sma calls)
        self.gamma_count = 0  # the cumulative mean's count

    # -- the official code's extras ----------------------------------------------------------
    def sample_pairs(self, round_idx: int, num_models: int, num_clients: int) -> torch.Tensor | None:
        """Host mask ``[m, n]`` of the pairs to train in round ``round_idx`` (0-based), or None for all.

        All pairs through the first MosT round (the code samples when ``epoch > warmup``), so the
        cache is full before any pair goes stale.
        """
        if self.sample_fraction >= 1.0 or round_idx <= self.warmup_rounds:
            return None
        total = num_models * num_clients
        k = max(int(self.sample_fraction * total), 1)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + int(round_idx) + 777_777)
        mask = torch.zeros(total, dtype=torch.bool)
        mask[torch.randperm(total, generator=gen)[:k]] = True
        return mask.view(num_models, num_clients)

    def _merge(self, deltas: torch.Tensor, losses: torch.Tensor, fresh: torch.Tensor | None):
        # Fresh results where sampled, the cached (stale) ones elsewhere; then cache the merge.
        if fresh is not None:
            if self.cache_deltas is None:
                raise ValueError("pair sampling needs a round with every pair first (the cache is empty)")
            f = fresh.to(deltas.device)
            deltas = torch.where(f.unsqueeze(-1), deltas, self.cache_deltas)
            losses = torch.where(f, losses, self.cache_losses)
        self.cache_deltas, self.cache_losses = deltas, losses
        return deltas, losses

    def _average(self, plan: torch.Tensor) -> torch.Tensor:
        """Fold a new plan into Γ̄ (the code's ``Moving_Average.update_sma``) and return Γ̄."""
        self.gamma_updates += 1
        on = self.gamma_momentum > 0 or self.gamma_average == "cumulative"
        if on and self.gamma_avg is not None and self.gamma_updates >= self.gamma_average_start:
            if self.gamma_average == "cumulative":
                self.gamma_count += 1
                self.gamma_avg = (self.gamma_avg * self.gamma_count + plan) / (1.0 + self.gamma_count)
            else:
                self.gamma_avg = self.gamma_momentum * self.gamma_avg + (1 - self.gamma_momentum) * plan
        else:
            self.gamma_avg = plan
        return self.gamma_avg

    def _mgda(self, deltas: torch.Tensor, losses: torch.Tensor, gamma_bar: torch.Tensor):
        """Γ̄-weighted MGDA step, with ``ot_resolve`` OT re-solves on predicted losses (``federated_moo.py``)."""
        update = self.most.directions(deltas, gamma_bar)
        plan = None
        if self.ot_resolve:
            marginals = self.most.marginals(losses.detach().T)
            for k in range(self.ot_resolve):
                # The same scalar per model j: max_i Δ_ij·Δθ_j + ½‖Δθ_j‖ (norm, not squared, as in the code).
                shift = torch.einsum("jip,jp->ji", deltas, update).amax(1) + 0.5 * update.norm(dim=1)
                plan = self.most.assign(losses + shift.unsqueeze(1).to(losses), marginals=marginals)
                gamma_bar = self._average(plan)
                if k + 1 < self.ot_resolve:
                    update = self.most.directions(deltas, gamma_bar)
        return update, plan

    # -- the round ---------------------------------------------------------------------------
    def aggregate(self, deltas, losses, sizes, fresh: torch.Tensor | None = None):
        """Update ``[m, P]``; ``fresh [m, n]`` marks the pairs trained this round (pair sampling)."""
        if self.sample_fraction < 1.0 or fresh is not None:
            deltas, losses = self._merge(deltas, losses, fresh)
        self.rounds_done += 1
        if self.rounds_done <= self.warmup_rounds:
            return super().aggregate(deltas, losses, sizes)
        gamma = self.most.assign(losses)
        gamma_bar = self._average(gamma)
        s = self._objective(gamma, losses) if self.combine == "switch" else None
        branch = self._branch(s) if self.combine == "switch" else self.combine
        self.branches.append(branch)
        if branch == "linear":
            # MosT (L): Γ-weighted FedAvg with the round's plan, each column normalised to sum 1.
            w = gamma.T / gamma.sum(0).unsqueeze(-1).clamp_min(1e-30)
            update = torch.einsum("ji,jip->jp", w.to(deltas.dtype), deltas)
        else:
            update, plan = self._mgda(deltas, losses, gamma_bar)
            if s is not None and plan is not None:
                s = self._objective(plan, losses)  # the code feeds the re-solved plan's S to avg_S
        if s is not None:
            self._track(s)
        self.most.step_curriculum()
        return update

    @staticmethod
    def _objective(gamma: torch.Tensor, losses: torch.Tensor) -> float:
        # S = Σ_ij Γ_ij L_ij: one host read per server round (not a hot path).
        return float((gamma.to(losses.dtype) * losses.T).sum())

    def _branch(self, s: float) -> str:
        """The official code's test: MGDA if ``S = Σ_ij Γ_ij L_ij`` is below its running average.

        As in the code, the first MosT round compares with 0, so it is linear.
        """
        return "mgda" if s < self.avg_objective else "linear"

    def _track(self, s: float) -> None:
        # avg_S = S after the first MosT round, then the EMA (federated_moo.py).
        first = self.avg_objective == 0.0
        self.avg_objective = s if first else self.EMA * self.avg_objective + (1 - self.EMA) * s

    def state_dict(self) -> dict:
        return {
            "rounds_done": self.rounds_done,
            **self.most.state_dict(),
            "avg_objective": self.avg_objective,
            "branches": list(self.branches),
            "cache_deltas": self.cache_deltas,
            "cache_losses": self.cache_losses,
            "gamma_avg": self.gamma_avg,
            "gamma_updates": self.gamma_updates,
            "gamma_count": self.gamma_count,
        }

    def load_state_dict(self, state: dict) -> None:
        self.rounds_done = int(state["rounds_done"])
        self.most.load_state_dict(state)  # Γ and the curriculum, stored flat in this dict
        self.avg_objective = float(state.get("avg_objective", 0.0))
        self.branches = list(state.get("branches", []))
        self.cache_deltas, self.cache_losses = state.get("cache_deltas"), state.get("cache_losses")
        self.gamma_avg = state.get("gamma_avg")
        self.gamma_updates, self.gamma_count = int(state.get("gamma_updates", 0)), int(state.get("gamma_count", 0))
