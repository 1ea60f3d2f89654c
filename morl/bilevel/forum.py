"""FORUM: a first-order multi-gradient method for multi-objective bi-level optimisation.

Ye, Lin, Cao, Zhang, Tsang, "A First-Order Multi-Gradient Algorithm for Multi-Objective
Bi-Level Optimization" (arXiv:2401.09257, ECAI 2024).

    min_{α, ω} F(α, ω) = (F_1, …, F_m)   s.t.   ω ∈ argmin_ω f(α, ω)

is rewritten with the value function as min_z F(z) s.t. q(z) = f(z) − f*(α) ≤ 0 (z = (α, ω)),
and f*(α) is approximated by T gradient steps on ω (ω̃^T), so ∇q̃(z) = ∇f(z) − (∇_α f(α, ω̃^T), 0)
needs no second derivatives. Each upper-level step solves the small QP (Eq. 11) for λ ∈ Δ^{m−1},
smooths λ with momentum (λ̃^k = (1−β_k)λ̃^{k−1} + β_k λ^k) and moves along

    d_k = −(Σ_i λ̃_i ∇F_i(z_k) + ν(λ̃) ∇q̃(z_k)),   ν(λ) = max(Σ_i λ_i π_i, 0),
    π_i = ρ − ⟨∇q̃, ∇F_i⟩ / ‖∇q̃‖²            (Algorithm 1; the paper's Eq. (9) with 2φ_k).

:func:`forum_direction` is the model-free core over flat gradient vectors;
:class:`FORUM` runs Algorithm 1 for objectives given as callables over parameter tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

from morl.bilevel.small_qp import solve_qp
from morl.gradients import flatten, per_task_grads, write_grads

__all__ = ["ForumDirection", "forum_lambda", "forum_direction", "FORUM", "beta_schedule"]


class ForumDirection(NamedTuple):
    """Output of :func:`forum_direction`; every field is a detached device tensor."""

    descent: torch.Tensor  #: [D] vector to descend, −d_k (write it into ``.grad``)
    lam: torch.Tensor  #: [m] the QP's λ^k
    lam_tilde: torch.Tensor  #: [m] momentum-smoothed λ̃^k, used in the direction
    nu: torch.Tensor  #: ν(λ̃^k) ≥ 0, the weight of ∇q̃
    pi: torch.Tensor  #: [m] π_i
    gamma: torch.Tensor  #: the QP's γ (for diagnostics; the direction uses ν(λ̃))


def beta_schedule(k: int, power: float = 0.75) -> float:
    """β_k = (k+1)^(−power): β_0 = 1 and β_k → 0 (the paper's (k+1)^(−3/4))."""
    return float(k + 1) ** (-power)


def _qp11_objective(gram: torch.Tensor, lam: torch.Tensor, gamma: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """½ RᵀMR − γφ for a batch of R = (λ, γ): ``lam`` [B, m], ``gamma`` [B]."""
    r = torch.cat([lam, gamma[:, None]], dim=1)
    return 0.5 * ((r @ gram) * r).sum(1) - gamma * phi


def _forum_lambda_2(gram: torch.Tensor, pi: torch.Tensor, phi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact QP (11) for m = 2, without iterations.

    With λ = (t, 1−t) and s(t) = λ·π, the reduced objective h(t) = Q(t, max(0, s(t))) is convex on
    [0, 1] (a partial minimum of a convex QP) and is one quadratic where s ≤ 0 (γ = 0) and another
    where s ≥ 0 (γ = s). Each piece's minimiser over its interval is its clipped vertex; the better
    of the two is the answer.
    """
    one = torch.ones((), dtype=gram.dtype, device=gram.device)
    t3 = torch.tensor([0.0, 0.5, 1.0], dtype=gram.dtype, device=gram.device)
    lam3 = torch.stack([t3, 1 - t3], dim=1)
    s3 = lam3 @ pi
    pieces = torch.stack([_qp11_objective(gram, lam3, torch.zeros_like(s3), phi), _qp11_objective(gram, lam3, s3, phi)])
    # Quadratic through the values at t = 0, ½, 1: c0 + c1 t + c2 t².
    c1 = -3 * pieces[:, 0] + 4 * pieces[:, 1] - pieces[:, 2]
    c2 = 2 * pieces[:, 0] - 4 * pieces[:, 1] + 2 * pieces[:, 2]
    delta, s0 = pi[0] - pi[1], pi[1]  # s(t) = s0 + t·δ
    flat = delta.abs() <= 1e-15 * (pi.abs().amax() + 1)
    t0 = torch.where(flat, 0.5 * one, -s0 / torch.where(flat, one, delta))
    below = (torch.where(delta > 0, 0 * one, t0.clamp(0, 1)), torch.where(delta > 0, t0.clamp(0, 1), one))  # s ≤ 0
    above = (torch.where(delta > 0, t0.clamp(0, 1), 0 * one), torch.where(delta > 0, one, t0.clamp(0, 1)))  # s ≥ 0
    lo = torch.stack([torch.where(flat, torch.where(s0 <= 0, 0 * one, 2 * one), below[0]),
                      torch.where(flat, torch.where(s0 >= 0, 0 * one, 2 * one), above[0])])  # fmt: skip
    hi = torch.stack([torch.where(flat, one, below[1]), torch.where(flat, one, above[1])])
    curved = c2 > 1e-14 * (c1.abs() + pieces.abs().amax(1) + 1)
    vertex = torch.where(curved, -c1 / torch.where(curved, 2 * c2, one), torch.where(c1 > 0, lo, hi))
    cand = torch.minimum(torch.maximum(vertex, lo), hi)
    valid = lo <= hi
    cand = torch.where(valid, cand, 0.5 * one)
    lam_c = torch.stack([cand, 1 - cand], dim=1)
    gamma_c = (lam_c @ pi).clamp_min(0.0)
    value = torch.where(valid, _qp11_objective(gram, lam_c, gamma_c, phi), torch.full_like(cand, float("inf")))
    best = value.argmin()
    return lam_c[best], gamma_c[best]


def forum_lambda(gram: torch.Tensor, pi: torch.Tensor, phi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """λ^k and γ from QP (11) given the Gramian of [∇F_1, …, ∇F_m, ∇q̃].

    min_{λ ∈ Δ, γ} ½‖Σλ_i∇F_i + γ∇q̃‖² − γφ   s.t.  γ ≥ 0,  γ ≥ Σλ_iπ_i.

    ``gram`` is (m+1)×(m+1) (last row/column: ∇q̃). Variables are rescaled by the square roots
    of the Gramian's diagonal (Jacobi), so gradient blocks of very different size (‖∇q̃‖ ≪ ‖∇F‖
    near the lower-level optimum) give a well-conditioned problem. When ∇q̃ = 0 the γ block
    carries no information: it gets unit curvature so the QP stays bounded and λ is the
    min-norm (MGDA) point of the ∇F_i.
    """
    m = pi.shape[0]
    gram = gram.to(torch.float64)
    diag = torch.diagonal(gram).clamp_min(0.0)
    scale = diag.amax().clamp_min(torch.finfo(torch.float64).tiny)
    degenerate = diag[m] <= 1e-24 * scale
    d = torch.where(diag > 1e-30 * scale, diag.sqrt(), scale.sqrt())
    P = gram / (d[:, None] * d[None, :])
    P[m, m] = torch.where(degenerate, torch.ones_like(P[m, m]), P[m, m])
    q = torch.zeros(m + 1, dtype=torch.float64, device=gram.device)
    q[m] = -phi.to(torch.float64) / d[m]
    inv_d = 1.0 / d
    A = torch.cat([inv_d[:m], inv_d.new_zeros(1)])[None, :]
    a_scale = A.abs().amax()
    G = torch.zeros(m + 2, m + 1, dtype=torch.float64, device=gram.device)
    idx = torch.arange(m + 1, device=gram.device)
    G[idx, idx] = -inv_d
    G[m + 1, :m] = pi.to(torch.float64) * inv_d[:m]
    G[m + 1, m] = -inv_d[m]
    h = torch.zeros(m + 2, dtype=torch.float64, device=gram.device)
    x, _ = solve_qp(P, q, A / a_scale, (1.0 / a_scale).reshape(1), G, h)
    x = x * inv_d
    lam = x[:m].clamp_min(0.0)
    lam = lam / lam.sum().clamp_min(torch.finfo(torch.float64).tiny)
    return lam, x[m]


def forum_direction(
    upper_grads: torch.Tensor,
    constraint_grad: torch.Tensor,
    rho: float,
    lam_prev: torch.Tensor | None = None,
    beta: float = 1.0,
    eps: float = 0.0,
    qp: str = "auto",
) -> ForumDirection:
    """One FORUM direction (Algorithm 1, lines 11–14) from flat gradients.

    ``upper_grads`` [m, D] holds ∇F_i(z_k) and ``constraint_grad`` [D] holds ∇q̃(z_k), both over the
    stacked (α, ω) coordinates. ``lam_prev`` is λ̃^{k−1} (None = 0, Algorithm 1 line 2) and ``beta``
    is β_k. ``eps`` is added to ‖∇q̃‖² in π (the official code uses 1e-8); the default 0 divides
    exactly and treats ∇q̃ = 0 as "no constraint information" (π = ρ, ν∇q̃ = 0). ``qp="auto"``
    solves QP (11) in closed form for m = 2 and with the interior-point solver for m > 2;
    ``qp="ipm"`` always uses the interior-point solver.
    """
    if upper_grads.dim() != 2 or upper_grads.shape[0] < 1:
        raise ValueError(f"upper_grads must have shape [m, D] with m >= 1, got {tuple(upper_grads.shape)}")
    m, dim = upper_grads.shape
    if constraint_grad.shape != (dim,):
        raise ValueError(f"constraint_grad must have shape [D]={dim}, got {tuple(constraint_grad.shape)}")
    if rho < 0:
        raise ValueError(f"rho must be >= 0, got {rho}")
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"beta must be in (0, 1], got {beta}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if qp not in ("auto", "ipm"):
        raise ValueError(f"qp={qp!r} is not valid; allowed: auto, ipm")
    rows = torch.cat([upper_grads, constraint_grad[None, :]]).to(torch.float64)
    amax = rows.abs().amax()
    rows = rows / torch.where(amax > 0, amax, torch.ones_like(amax))  # overflow-safe Gramian
    gram = rows @ rows.T
    gq_sq = gram[m, m]
    cross = gram[:m, m]
    scaled_eps = eps / torch.where(amax > 0, amax, torch.ones_like(amax)).to(torch.float64) ** 2
    denom = gq_sq + scaled_eps
    zero_gq = denom <= 1e-24 * torch.diagonal(gram).amax().clamp_min(torch.finfo(torch.float64).tiny)
    pi = rho - torch.where(
        zero_gq, torch.zeros_like(cross), cross / torch.where(zero_gq, torch.ones_like(denom), denom)
    )
    phi = 0.5 * rho * gq_sq
    if m == 1:
        lam = torch.ones(1, dtype=torch.float64, device=rows.device)
        gamma = torch.clamp(pi[0], min=0.0)
    elif m == 2 and qp == "auto":
        lam, gamma = _forum_lambda_2(gram, pi, phi)
    else:
        lam, gamma = forum_lambda(gram, pi, phi)
    prev = torch.zeros_like(lam) if lam_prev is None else lam_prev.to(lam)
    lam_tilde = (1.0 - beta) * prev + beta * lam
    nu = torch.clamp(lam_tilde @ pi, min=0.0)
    dtype = upper_grads.dtype
    descent = lam_tilde.to(dtype) @ upper_grads + nu.to(dtype) * constraint_grad
    return ForumDirection(descent.detach(), lam, lam_tilde, nu, pi, gamma)


Objective = Callable[..., torch.Tensor]


class FORUM:
    """Algorithm 1 of FORUM for objectives written over parameter tensors.

    ``upper`` returns the [m] vector F(α, ω) and ``lower`` the scalar f(α, ω); both are called
    with the inputs given to :meth:`step` and read the current values of ``upper_params`` (α) and
    ``lower_params`` (ω) — e.g. closures over an ``nn.Module``. The inner loop runs T gradient
    steps on a copy of ω held in the parameters themselves and restores ω afterwards, so any
    module works unchanged and ω̃^T carries no autograd graph back to α.

    The step z_{k+1} = z_k + μ d_k is taken by ``optimizer`` (default: plain SGD with lr μ = ``lr``
    over α and ω, i.e. exactly the paper's update). Per-block step sizes go through ``optimizer``:
    one optimizer with two parameter groups (SGD, lr 10 on α and 0.3 on ω, as in hyper-cleaning)
    or a list of optimizers (Adam on α and the model's own optimizer on ω, as in the MTL code);
    each receives ``.grad = −d_k`` on its parameters.
    """

    def __init__(
        self,
        upper_params: Sequence[torch.Tensor],
        lower_params: Sequence[torch.Tensor],
        upper: Objective,
        lower: Objective,
        *,
        inner_steps: int = 16,
        inner_lr: float = 0.3,
        rho: float = 0.5,
        lr: float = 0.3,
        beta_power: float = 0.75,
        warm_start: bool = True,
        normalize_upper: bool = False,
        eps: float = 0.0,
        divergence_threshold: float = 1e5,
        optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
        check_finite: str = "raise",
    ) -> None:
        self.alpha = [p for p in upper_params]
        self.omega = [p for p in lower_params]
        if not self.alpha or not self.omega:
            raise ValueError("FORUM needs at least one upper-level (α) and one lower-level (ω) parameter tensor")
        _check_positive(inner_steps=inner_steps, inner_lr=inner_lr, lr=lr, divergence_threshold=divergence_threshold)
        if rho < 0:
            raise ValueError(f"rho must be >= 0, got {rho}")
        if beta_power < 0:
            raise ValueError(f"beta_power must be >= 0, got {beta_power}")
        if check_finite not in ("raise", "skip"):
            raise ValueError(f"check_finite={check_finite!r} is not valid; allowed: raise, skip")
        self.upper, self.lower = upper, lower
        self.inner_steps, self.inner_lr, self.rho = int(inner_steps), float(inner_lr), float(rho)
        self.beta_power, self.warm_start, self.normalize_upper = beta_power, warm_start, normalize_upper
        self.eps, self.divergence_threshold, self.check_finite = eps, divergence_threshold, check_finite
        self.params = self.alpha + self.omega
        self.n_alpha = sum(p.numel() for p in self.alpha)
        if optimizer is None:
            optimizer = torch.optim.SGD(self.params, lr=lr)
        self.optimizers = [optimizer] if isinstance(optimizer, torch.optim.Optimizer) else list(optimizer)
        self.omega_init = [p.detach().clone() for p in self.omega]  # ω_0 for warm_start=False
        self.lam_tilde: torch.Tensor | None = None
        self.k = 0
        self.nonfinite_steps = torch.zeros((), dtype=torch.int64, device=self.omega[0].device)

    # -- the pieces of one iteration ------------------------------------------------------
    def inner_loop(self, *lower_inputs) -> torch.Tensor:
        """Run ω̃^{t+1} = ω̃^t − η∇_ω f(α_k, ω̃^t) in place for T steps; returns f(α_k, ω̃^T).

        A step whose loss is non-finite or above ``divergence_threshold`` freezes the loop
        (as the official code's early break) without reading anything back to the host.
        """
        alive = torch.ones((), dtype=torch.bool, device=self.omega[0].device)
        for _ in range(self.inner_steps):
            loss = self.lower(*lower_inputs)
            grads = torch.autograd.grad(loss, self.omega, allow_unused=True)
            alive = alive & torch.isfinite(loss) & (loss.detach() <= self.divergence_threshold)
            with torch.no_grad():
                for p, g in zip(self.omega, grads):
                    if g is not None:
                        p.sub_(torch.where(alive, self.inner_lr * torch.nan_to_num(g), torch.zeros_like(g)))
        return alive

    def gradients(self, lower_inputs: tuple, upper_inputs: tuple) -> dict[str, torch.Tensor]:
        """∇F_i(z_k) [m, D], ∇q̃(z_k) [D], and the values F(z_k), f(z_k), q̃(z_k)."""
        f_val = self.lower(*lower_inputs)
        g_f = flatten(_grads_or_zeros(f_val, self.params))
        saved = [p.detach().clone() for p in self.omega]
        with torch.no_grad():
            if not self.warm_start:
                for p, p0 in zip(self.omega, self.omega_init):
                    p.copy_(p0)
        alive = self.inner_loop(*lower_inputs)
        f_hat = self.lower(*lower_inputs)
        g_hat_alpha = flatten(_grads_or_zeros(f_hat, self.alpha))
        with torch.no_grad():
            for p, s in zip(self.omega, saved):
                p.copy_(s)
        g_q = g_f.clone()
        g_q[: self.n_alpha] -= g_hat_alpha
        upper_vals = self.upper(*upper_inputs)
        if upper_vals.dim() != 1:
            raise ValueError(f"upper must return a 1-D [m] tensor of objectives, got shape {tuple(upper_vals.shape)}")
        g_upper = per_task_grads(upper_vals, self.params)
        if self.normalize_upper:
            g_upper = g_upper / (g_upper.norm(dim=1, keepdim=True) + 1e-8)
        return {
            "upper_grads": g_upper,
            "constraint_grad": g_q,
            "upper": upper_vals.detach(),
            "lower": f_val.detach(),
            "q_tilde": (f_val - f_hat).detach(),
            "inner_ok": alive,
        }

    # -- one iteration ----------------------------------------------------------------------
    def step(
        self, lower_inputs: tuple = (), upper_inputs: tuple = (), beta: float | None = None
    ) -> dict[str, torch.Tensor]:
        """One upper-level iteration (Algorithm 1, lines 4–15); returns detached diagnostics.

        ``beta`` overrides β_k (e.g. the official code's per-epoch schedule); by default
        β_k = (k+1)^(−beta_power) with k this object's iteration counter.
        """
        beta = beta_schedule(self.k, self.beta_power) if beta is None else float(beta)
        g = self.gradients(tuple(lower_inputs), tuple(upper_inputs))
        out = forum_direction(g["upper_grads"], g["constraint_grad"], self.rho, self.lam_tilde, beta, self.eps)
        descent = out.descent
        finite = torch.isfinite(descent).all()
        if self.check_finite == "raise":
            if not bool(finite):
                raise ValueError(
                    f"FORUM step {self.k}: the direction is not finite (NaN/inf in the gradients or objectives)"
                )
        else:
            descent = torch.where(finite, descent, torch.zeros_like(descent))
            self.nonfinite_steps = self.nonfinite_steps + (~finite).to(torch.int64)
        self.lam_tilde = (
            torch.where(finite, out.lam_tilde, self.lam_tilde) if self.lam_tilde is not None else out.lam_tilde
        )
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        write_grads(self.params, descent, accumulate=False)
        for opt in self.optimizers:
            opt.step()
        self.k += 1
        g_q = g["constraint_grad"]
        return {
            "upper": g["upper"],
            "lower": g["lower"],
            "q_tilde": g["q_tilde"],
            "constraint_grad_norm": g_q.norm(),
            "lam": out.lam,
            "lam_tilde": out.lam_tilde,
            "nu": out.nu,
            "gamma": out.gamma,
            "barrier": -(g_q @ descent),  # ⟨∇q̃, d_k⟩; equals −ρ‖∇q̃‖² whenever ν > 0
            "kkt": descent.pow(2).sum(),  # ‖Σλ̃∇F + ν∇q̃‖², the paper's stationarity measure with q̃
            "beta": torch.tensor(beta),
            "inner_ok": g["inner_ok"],
        }

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "k": self.k,
            "lam_tilde": None if self.lam_tilde is None else self.lam_tilde.clone(),
            "omega_init": [p.clone() for p in self.omega_init],
            "optimizers": [opt.state_dict() for opt in self.optimizers],
            "nonfinite_steps": self.nonfinite_steps.clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.k = int(state["k"])
        self.lam_tilde = state["lam_tilde"]
        self.omega_init = [p.clone() for p in state["omega_init"]]
        for opt, st in zip(self.optimizers, state["optimizers"], strict=True):
            opt.load_state_dict(st)
        self.nonfinite_steps = state["nonfinite_steps"].clone()


def _grads_or_zeros(value: torch.Tensor, params: list[torch.Tensor]) -> list[torch.Tensor]:
    if value.dim() != 0:
        raise ValueError(f"lower must return a scalar f(α, ω), got shape {tuple(value.shape)}")
    grads = torch.autograd.grad(value, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]


def _check_positive(**values: float) -> None:
    for name, v in values.items():
        if not v > 0:
            raise ValueError(f"{name} must be > 0, got {v}")
