"""MosT: many-objective multi-solution transport (Li et al., arXiv:2403.04099, ICLR 2025).

``m`` models serve ``n`` objectives. Each round (Algorithm 1):

1. :meth:`MosT.assign` — the transport plan ``Γ [n, m]`` between objectives and models,
   ``Γ = argmin_{Γ1=α, Γᵀ1=β} Σ_ij Γ_ij L_i(θ_j) + τ R(Γ)`` (Eq. 5, :mod:`morl.transport`);
2. :meth:`MosT.directions` — per model ``j`` the Γ-weighted MGDA direction over the objectives
   the plan gives it, ``λ_j = argmin_{λ∈Δ(S_j)} ‖Σ_i λ_i Γ_ij ∇L_i(θ_j)‖²`` (Eq. 7) on the support
   ``S_j = {i : Γ_ij > threshold}``, and ``dir_j = Σ_i λ_ij Γ_ij ∇L_i(θ_j)`` (Eq. 8). Like every
   aggregator in morl, the returned direction is the one to DESCEND: ``θ_j ← θ_j − η dir_j``.

:class:`MosTE` adds Dirichlet-interpolated objectives for ``n < m`` (MosT-E, Eq. 9);
:class:`CurriculumSchedule` moves the marginals between uniform and performance-based (§3.3);
:func:`run` is Algorithm 1 for objectives given as a differentiable function of the models.

Conventions: ``losses [m, n]`` has ``losses[j, i] = L_i(θ_j)``; ``Γ [n, m]``; ``jacobians
[m, n, D]`` has row ``i`` of block ``j`` equal to ``∇L_i(θ_j)`` (or a list of ``m`` tensors
``[n, D_j]``). Pseudo-gradients (FL client deltas) work in place of gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from morl import transport
from morl.solvers.min_norm import min_norm

GAMMA_SCALES = ("paper", "code")
UPDATES = ("paper", "code")
DIRECTIONS = ("paper", "code")


class CurriculumSchedule:
    """Solution-specialisation curriculum: marginals between uniform and performance-based.

    With the cost normalised as ``C = clamp(L, 0) / Σ L`` ([n, m]) and total mass ``M``:

    * ``α_ls,i ∝ min_j C_ij`` (objectives no model serves well get more mass),
      ``β_ls,j ∝ Σ of the k smallest C_ij over i`` with ``k = max(⌊topk_ratio·n⌋, 1)``;
    * uniform ``α_un = M/n``, ``β_un = M/m``.

    ``direction="paper"`` (default, §3.3 of the paper): ``α = s α_ls + (1−s) α_un`` and
    ``β = (1−s) β_ls + s β_un`` — uniform β first, uniform α at the end as ``s`` decays from
    ``s0`` towards 0 by ``s ← decay·s`` per :meth:`step`. ``direction="code"`` is the official
    code's reverse mixing (α uniform first). Both marginals always carry the same mass ``M``.
    """

    def __init__(
        self, direction: str = "paper", s0: float = 1.0, decay: float = 0.995, topk_ratio: float = 0.1
    ) -> None:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction={direction!r} is not valid; allowed: {', '.join(DIRECTIONS)}")
        if not 0.0 <= s0 <= 1.0:
            raise ValueError(f"s0 must be in [0, 1], got {s0}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        if not 0.0 < topk_ratio <= 1.0:
            raise ValueError(f"topk_ratio must be in (0, 1], got {topk_ratio}")
        self.direction, self.s0, self.decay, self.topk_ratio = direction, s0, decay, topk_ratio
        self.s = s0

    def performance_marginals(self, cost: torch.Tensor, mass: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``(α_ls [n], β_ls [m])`` from a cost ``[n, m]`` (losses), each summing to ``mass``."""
        n, m = cost.shape
        c = cost.clamp_min(0)
        c = c / c.sum().clamp_min(torch.finfo(c.dtype).tiny)
        k = max(int(self.topk_ratio * n), 1)
        row = c.amin(-1)
        col = torch.topk(c, k, dim=0, largest=False).values.sum(0)
        return _normalise(row, mass), _normalise(col, mass)

    def marginals(self, cost: torch.Tensor, mass: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """The marginals ``(α [n], β [m])`` for the current ``s``."""
        n, m = cost.shape
        a_ls, b_ls = self.performance_marginals(cost, mass)
        a_un = torch.full_like(a_ls, mass / n)
        b_un = torch.full_like(b_ls, mass / m)
        s = self.s
        if self.direction == "paper":
            return s * a_ls + (1 - s) * a_un, (1 - s) * b_ls + s * b_un
        return (1 - s) * a_ls + s * a_un, s * b_ls + (1 - s) * b_un

    def step(self) -> None:
        self.s *= self.decay

    def state_dict(self) -> dict:
        return {"s": self.s}

    def load_state_dict(self, state: dict) -> None:
        self.s = float(state["s"])


def _normalise(x: torch.Tensor, mass: float) -> torch.Tensor:
    total = x.sum()
    uniform = torch.full_like(x, mass / x.numel())
    return torch.where(total > 0, x * mass / total.clamp_min(torch.finfo(x.dtype).tiny), uniform)


def dirichlet_mixtures(
    num_objectives: int,
    num_aux: int,
    shape: float = 1.0,
    include_original: bool = True,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """MosT-E mixing matrix ``W [n', n]``: rows are objective weights (Eq. 9).

    ``num_aux`` rows are drawn from ``Dir(shape·1_n)``; with ``include_original`` the identity
    (the ``n`` original objectives) comes first, so ``n' = n + num_aux`` (paper); without it
    ``n' = num_aux`` (the official ZDT code uses 25 mixtures only).
    """
    if num_objectives < 1 or num_aux < 0:
        raise ValueError(f"need num_objectives >= 1 and num_aux >= 0, got {num_objectives}, {num_aux}")
    if shape <= 0:
        raise ValueError(f"dirichlet shape must be > 0, got {shape}")
    # Dirichlet by normalised Gamma draws, so a torch.Generator controls the randomness.
    g = _standard_gamma(torch.full((num_aux, num_objectives), float(shape), dtype=torch.float64), generator)
    w = g / g.sum(-1, keepdim=True)
    if include_original:
        w = torch.cat([torch.eye(num_objectives, dtype=torch.float64), w])
    if w.shape[0] == 0:
        raise ValueError("MosT-E needs at least one objective: num_aux > 0 or include_original=True")
    return w.to(dtype)


def _standard_gamma(shape: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    # Marsaglia–Tsang with the boost for shape < 1; vectorised rejection.
    boost = shape < 1
    a = torch.where(boost, shape + 1, shape)
    d = a - 1.0 / 3
    c = 1.0 / torch.sqrt(9 * d)
    out = torch.empty_like(a)
    todo = torch.ones_like(a, dtype=torch.bool)
    while bool(todo.any()):
        x = torch.randn(a.shape, generator=generator, dtype=a.dtype)
        u = torch.rand(a.shape, generator=generator, dtype=a.dtype)
        v = (1 + c * x) ** 3
        ok = (v > 0) & (torch.log(u.clamp_min(1e-300)) < 0.5 * x * x + d - d * v + d * torch.log(v.clamp_min(1e-300)))
        take = ok & todo
        out = torch.where(take, d * v, out)
        todo = todo & ~ok
    u = torch.rand(a.shape, generator=generator, dtype=a.dtype)
    return torch.where(boost, out * u ** (1.0 / shape), out)


class MosT:
    """The MosT assignment (optimal transport) and per-model Γ-weighted MGDA directions.

    Args:
        num_models: ``m``.
        alpha, beta: fixed marginals ``[n]`` / ``[m]`` (any equal positive mass; rescaled per
            ``gamma_scale``). Default uniform. Ignored while a ``curriculum`` is set.
        tau: diversity regulariser weight τ ≥ 0 (``R(Γ) = −Σ_i max_j Γ_ij``).
        solver: ``"ipot"`` (exact OT, the paper's) or ``"sinkhorn"``; ``solver_options`` go to
            :func:`morl.transport.solve` (e.g. ``{"eps": 1e-3}``, ``{"step": 0.01}``).
        gamma_scale: ``"paper"`` — Γ has total mass 1 (α, β on the simplex); ``"code"`` — total
            mass m (α_i = m/n, β_j = 1 under uniform marginals), as in the official code.
        update: ``"paper"`` — ``dir_j = Σ_i λ_ij Γ_ij g_ij`` (Eq. 8); ``"code"`` — Γ only selects
            the support and weights the min-norm problem, the step is ``Σ_i λ_ij g_ij``.
        support_threshold: objectives with ``Γ_ij ≤ threshold · mass`` are outside model j's
            min-norm problem (the code's 1e-8). Keeping zero-weight objectives in would put
            the zero vector in the hull and stall the model.
        curriculum: a :class:`CurriculumSchedule`; its :meth:`~CurriculumSchedule.step` is called
            by :meth:`step_curriculum` (once per round, by the caller).
        warm_start: start each OT solve from the previous plan (IPOT's proximal centre).
        min_norm_iters: iteration cap of the min-norm solver.
        on_violation: what a transport plan that misses its marginals does (see
            :func:`morl.transport.check_marginals`).
    """

    def __init__(
        self,
        num_models: int,
        alpha: torch.Tensor | None = None,
        beta: torch.Tensor | None = None,
        tau: float = 0.0,
        solver: str = "ipot",
        solver_options: dict | None = None,
        gamma_scale: str = "paper",
        update: str = "paper",
        support_threshold: float = 1e-8,
        curriculum: CurriculumSchedule | None = None,
        warm_start: bool = True,
        min_norm_iters: int = 100,
        on_violation: str = "raise",
    ) -> None:
        if num_models < 1:
            raise ValueError(f"num_models must be >= 1, got {num_models}")
        if gamma_scale not in GAMMA_SCALES:
            raise ValueError(f"gamma_scale={gamma_scale!r} is not valid; allowed: {', '.join(GAMMA_SCALES)}")
        if update not in UPDATES:
            raise ValueError(f"update={update!r} is not valid; allowed: {', '.join(UPDATES)}")
        if solver not in transport.SOLVERS:
            raise ValueError(f"solver={solver!r} is not valid; allowed: {', '.join(transport.SOLVERS)}")
        if tau < 0:
            raise ValueError(f"tau must be >= 0, got {tau}")
        if beta is not None and beta.shape != (num_models,):
            raise ValueError(f"beta must have shape [{num_models}], got {tuple(beta.shape)}")
        self.num_models = num_models
        self.alpha, self.beta = alpha, beta
        self.tau, self.solver, self.solver_options = tau, solver, dict(solver_options or {})
        self.gamma_scale, self.update = gamma_scale, update
        self.support_threshold = support_threshold
        self.curriculum, self.warm_start = curriculum, warm_start
        self.min_norm_iters, self.on_violation = min_norm_iters, on_violation
        self.gamma: torch.Tensor | None = None  #: last plan Γ [n, m]
        self.result: transport.TransportResult | None = None  #: last solver diagnostics
        self.weights: torch.Tensor | None = None  #: last effective weights [m, n]: dir_j = weights[j] @ g_j
        self.lambdas: torch.Tensor | None = None  #: last min-norm weights λ [m, n] (zero off-support)

    def state_dict(self) -> dict:
        """What continues a run: the last plan Γ (the OT warm start) and the curriculum position."""
        cur = self.curriculum
        return {"gamma": self.gamma, "curriculum": None if cur is None else cur.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.gamma = state["gamma"]
        if self.curriculum is not None and state.get("curriculum") is not None:
            self.curriculum.load_state_dict(state["curriculum"])

    # -- marginals and the plan -------------------------------------------------------------
    def mass(self) -> float:
        return 1.0 if self.gamma_scale == "paper" else float(self.num_models)

    def marginals(self, cost: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(α [n], β [m])`` at the current scale for a cost ``[n, m]``."""
        n, m = cost.shape
        mass = self.mass()
        if self.curriculum is not None:
            return self.curriculum.marginals(cost, mass)
        a = (
            torch.full((n,), mass / n, dtype=cost.dtype, device=cost.device)
            if self.alpha is None
            else self._scaled(self.alpha, n, cost, "alpha")
        )
        b = (
            torch.full((m,), mass / m, dtype=cost.dtype, device=cost.device)
            if self.beta is None
            else self._scaled(self.beta, m, cost, "beta")
        )
        return a, b

    def _scaled(self, x: torch.Tensor, size: int, like: torch.Tensor, name: str) -> torch.Tensor:
        if x.shape != (size,):
            raise ValueError(f"{name} must have shape [{size}], got {tuple(x.shape)}")
        x = x.to(like)
        return x * (self.mass() / x.sum())

    def assign(self, losses: torch.Tensor, marginals: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Transport plan ``Γ [n, m]`` for ``losses [m, n]`` (``losses[j, i] = L_i(θ_j)``).

        ``marginals``: ``(α [n], β [m])`` to use instead of :meth:`marginals` of these losses (the
        official FL code re-solves the OT on predicted losses with the round's marginals, ``federated_moo.py``).
        """
        if losses.dim() != 2 or losses.shape[0] != self.num_models:
            raise ValueError(f"losses must have shape [m={self.num_models}, n], got {tuple(losses.shape)}")
        cost = losses.detach().T
        a, b = self.marginals(cost) if marginals is None else marginals
        plan0 = self.gamma if (self.warm_start and self.gamma is not None and self.gamma.shape == cost.shape) else None
        self.result = transport.solve(
            cost,
            a,
            b,
            tau=self.tau,
            method=self.solver,
            plan0=plan0,
            on_violation=self.on_violation,
            **self.solver_options,
        )
        self.gamma = self.result.plan
        return self.gamma

    def step_curriculum(self) -> None:
        """Advance the curriculum (once per round); no-op without one."""
        if self.curriculum is not None:
            self.curriculum.step()

    # -- directions ----------------------------------------------------------------------------
    def directions(self, jacobians: torch.Tensor | Sequence[torch.Tensor], gamma: torch.Tensor | None = None):
        """Per-model descent directions from per-(model, objective) gradients and a plan.

        ``jacobians``: ``[m, n, D]`` or a list of ``m`` tensors ``[n, D_j]``; ``gamma``: ``[n, m]``
        (default: the last :meth:`assign`). Returns ``[m, D]`` (or a list of ``[D_j]``) to descend.
        """
        gamma = self.gamma if gamma is None else gamma
        if gamma is None:
            raise ValueError("no transport plan: call assign(losses) first or pass gamma")
        if isinstance(jacobians, torch.Tensor):
            if jacobians.dim() != 3 or jacobians.shape[:2] != (gamma.shape[1], gamma.shape[0]):
                raise ValueError(
                    f"jacobians must have shape [m={gamma.shape[1]}, n={gamma.shape[0]}, D], got {tuple(jacobians.shape)}"
                )
            gram = torch.einsum("jid,jkd->jik", jacobians, jacobians)
            weights = self.weights_from_gramians(gram, gamma)
            return torch.einsum("ji,jid->jd", weights.to(jacobians.dtype), jacobians)
        jac = list(jacobians)
        if len(jac) != gamma.shape[1] or any(J.dim() != 2 or J.shape[0] != gamma.shape[0] for J in jac):
            raise ValueError(f"jacobians must be {gamma.shape[1]} tensors of shape [n={gamma.shape[0]}, D_j]")
        gram = torch.stack([J @ J.T for J in jac])
        weights = self.weights_from_gramians(gram, gamma)
        return [weights[j].to(J.dtype) @ J for j, J in enumerate(jac)]

    def weights_from_gramians(self, grams: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        """Effective weights ``[m, n]`` from the per-model Gramians ``[m, n, n]`` of the raw gradients.

        Solves Eq. (7) on the support of each column by the duplicate trick: an objective off the
        support is replaced by the support's heaviest objective, which leaves the convex hull (and
        so the min-norm point) unchanged; its λ is then credited back to that objective.
        """
        g = gamma.T.to(grams.dtype)  # [m, n]
        mass = gamma.sum()
        support = g > self.support_threshold * mass
        rep = torch.where(support, torch.arange(g.shape[1], device=g.device), g.argmax(-1, keepdim=True))  # [m, n]
        # Off-support weights are dropped, not just ignored: products of ~1e-200 entries are
        # subnormal and make every later matmul crawl.
        g = torch.where(support, g, torch.zeros_like(g))
        scaled = grams * g.unsqueeze(-1) * g.unsqueeze(-2)  # Gram of the Γ-scaled gradients
        idx_r = rep.unsqueeze(-1).expand(-1, -1, g.shape[1])
        dup = torch.gather(torch.gather(scaled, 1, idx_r), 2, rep.unsqueeze(-2).expand(-1, g.shape[1], -1))
        lam_dup = min_norm(dup, max_iter=self.min_norm_iters)
        lam = torch.zeros_like(lam_dup).scatter_add_(1, rep, lam_dup)
        self.lambdas = lam.detach()
        weights = lam * g if self.update == "paper" else lam
        self.weights = weights.detach()
        return weights


class MosTE(MosT):
    """MosT-E for few objectives (n < m): MosT over ``n'`` Dirichlet-interpolated objectives.

    ``losses [m, n]`` and ``jacobians [m, n, D]`` of the *original* objectives are mapped through
    the mixing matrix ``W [n', n]`` (:func:`dirichlet_mixtures`) before transport and MGDA.
    """

    def __init__(
        self,
        num_models: int,
        num_objectives: int,
        num_aux: int = 25,
        dirichlet_shape: float = 1.0,
        include_original: bool = True,
        seed: int = 0,
        **kwargs,
    ) -> None:
        super().__init__(num_models, **kwargs)
        gen = torch.Generator().manual_seed(seed)
        self.mixing = dirichlet_mixtures(num_objectives, num_aux, dirichlet_shape, include_original, gen)

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``[m, n, ...]`` per-objective values to ``[m, n', ...]``."""
        w = self.mixing.to(x)
        return torch.einsum("kn,mn...->mk...", w, x)

    def assign(self, losses: torch.Tensor) -> torch.Tensor:
        return super().assign(self.mix(losses))

    def directions(self, jacobians, gamma=None):
        if isinstance(jacobians, torch.Tensor):
            return super().directions(self.mix(jacobians), gamma)
        return super().directions([self.mixing.to(J) @ J for J in jacobians], gamma)


def losses_and_jacobians(
    objectives: Callable[[torch.Tensor], torch.Tensor], thetas: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(losses [m, n], jacobians [m, n, D])`` of ``objectives: θ [D] -> [n]`` at ``thetas [m, D]``."""
    from torch.func import jacrev, vmap

    def twice(theta):
        out = objectives(theta)
        return out, out

    def both(theta):
        jac, value = jacrev(twice, has_aux=True)(theta)
        return value, jac

    return vmap(both)(thetas)


def run(
    objectives: Callable[[torch.Tensor], torch.Tensor],
    thetas: torch.Tensor,
    most: MosT,
    lr: float,
    rounds: int,
    inner_steps: int = 1,
    project: Callable[[torch.Tensor], torch.Tensor] | None = None,
    callback: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None,
    step: str = "gd",
) -> torch.Tensor:
    """Algorithm 1: ``rounds`` × (assign Γ; ``inner_steps`` × θ_j ← θ_j − lr·dir_j with Γ fixed).

    ``step="sign"`` moves by ``lr·sign(dir_j)`` instead — what the official ZDT code's fresh Adam
    optimiser per step amounts to (Adam's first step is ``lr·g/|g|``).

    ``objectives`` maps one model ``θ [D]`` to its ``n`` losses (differentiable, vmappable);
    ``project`` (optional) maps the models back onto their domain after each step (e.g. a box
    clamp for ZDT); ``callback(round, thetas, gamma)`` runs after each round.
    """
    if step not in ("gd", "sign"):
        raise ValueError(f"step={step!r} is not valid; allowed: gd, sign")
    thetas = thetas.detach().clone()
    for t in range(rounds):
        losses, _ = losses_and_jacobians(objectives, thetas)
        gamma = most.assign(losses)
        for _ in range(inner_steps):
            _, jac = losses_and_jacobians(objectives, thetas)
            d = most.directions(jac, gamma)
            thetas = thetas - lr * (torch.sign(d) if step == "sign" else d)
            if project is not None:
                thetas = project(thetas)
        most.step_curriculum()
        if callback is not None:
            callback(t, thetas, gamma)
    return thetas


__all__ = ["MosT", "MosTE", "CurriculumSchedule", "dirichlet_mixtures", "losses_and_jacobians", "run"]
