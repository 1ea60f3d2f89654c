"""CAGrad (Liu et al. 2021): conflict-averse gradient descent.

Primal: maximise min_i g_i·d over the ball ‖d − g0‖ ≤ c‖g0‖ around the mean gradient g0.
Dual over the simplex (what the reference code solves):

    w* = argmin_{w∈Δ_K} g_w·g0 + c‖g0‖ ‖g_w‖,   g_w = Σ_k w_k g_k,
    d  = g0 + (c‖g0‖ / ‖g_w*‖) g_w*,

then divided by 1 (rescale=0), 1 + c² (rescale=1, the reference default) or 1 + c (rescale=2).
Only inner products enter, so the dual is solved on the K×K Gramian, in torch, with no scipy
and no host sync: exactly by support enumeration for K ≤ ``EXACT_MAX_K`` (one batched solve,
:func:`cagrad_dual_exact`), above that by accelerated projected gradient with a masked line
search (:func:`cagrad_dual_weights`).
"""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators._warm_start import WarmStartSolver
from morl.aggregators.base import GramianAggregator
from morl.solvers.min_norm import EXACT_MAX_K, support_systems
from morl.solvers.simplex_descent import minimize_on_simplex

RESCALES = (0, 1, 2)
#: smoothing of ‖g_w‖ = sqrt(wᵀGw + EPS) and guard of the division, on G / max diag
EPS = 1e-12
TINY = 1e-150


def cagrad_dual_weights(
    gram: torch.Tensor, c: float, max_iter: int = 100, tol: float = 1e-10, init: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weights, w*)`` for a normalised ``gram``: d = weights·g before the rescale, w* the dual
    solution on the simplex (pass it back as ``init`` to warm-start the next solve)."""
    k = gram.shape[-1]
    g = gram.to(torch.float64)
    b = g.mean(-1)  # g_k · g0
    g0_sq = b.mean(-1, keepdim=True).clamp(min=0.0)
    r = c * torch.sqrt(g0_sq)  # c ‖g0‖

    def fun(w):
        gw = (g @ w.unsqueeze(-1)).squeeze(-1)
        norm = torch.sqrt((w * gw).sum(-1, keepdim=True).clamp(min=0.0) + EPS)
        return (w * b).sum(-1) + (r * norm).squeeze(-1), b + r * gw / norm

    w0 = torch.full(g.shape[:-1], 1.0 / k, dtype=g.dtype, device=g.device) if init is None else init.to(g)
    step0 = 1.0 / (torch.diagonal(g, dim1=-2, dim2=-1).sum(-1) * (1.0 + c) + EPS)
    w = minimize_on_simplex(fun, w0, step0, max_iter=max_iter, tol=tol)
    gw_norm = torch.sqrt((w * (g @ w.unsqueeze(-1)).squeeze(-1)).sum(-1, keepdim=True).clamp(min=0.0))
    # ‖(r/max(‖g_w‖, tiny)) g_w‖ ≤ r always, so d stays inside the c-ball even when g_w ≈ 0.
    lam = r / gw_norm.clamp(min=TINY)
    return 1.0 / k + lam * w, w


def cagrad_dual_exact(gram: torch.Tensor, c: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The dual of :func:`cagrad_dual_weights` solved exactly by enumerating supports (small K).

    On a support S the stationarity conditions ``b_S + r G_SS w / s = ν 1`` with
    ``s = ‖g_w‖ = sqrt(wᵀGw)`` give ``w = s v``, ``v = G_SS⁻¹(ν1 − b_S) / r``; ``vᵀG_SS v = 1``
    is a quadratic in ν, ``A ν² − 2 B ν + C − r² = 0`` with ``A = 1ᵀG⁻¹1``, ``B = 1ᵀG⁻¹b``,
    ``C = bᵀG⁻¹b``, whose larger root makes ``1ᵀv = sqrt(B² − A(C − r²)) / r > 0`` and
    ``w = v / 1ᵀv``. The objective is convex, so the optimum is the feasible (w ≥ 0)
    candidate of least objective; every singleton support is feasible, so one always exists.
    """
    k = gram.shape[-1]
    g = gram.to(torch.float64)
    b = g.mean(-1)
    r = c * torch.sqrt(b.mean(-1, keepdim=True).clamp(min=0.0))  # [..., 1]
    m, a = support_systems(g)  # [S, K], [..., S, K, K]
    rhs = torch.stack([m.expand(a.shape[:-1]), m * b.unsqueeze(-2)], dim=-1)  # [..., S, K, 2]: 1_S, b_S
    sol = torch.linalg.solve(a, rhs)
    g_inv_1, g_inv_b = sol[..., 0], sol[..., 1]
    big_a = (m * g_inv_1).sum(-1)
    big_b = (m * g_inv_b).sum(-1)
    big_c = (m * b.unsqueeze(-2) * g_inv_b).sum(-1)
    root = torch.sqrt((big_b.square() - big_a * (big_c - r.square())).clamp(min=0.0))
    nu = (big_b + root) / big_a
    v = nu.unsqueeze(-1) * g_inv_1 - g_inv_b  # r·v, the positive factor cancels in w
    total = v.sum(-1, keepdim=True)
    w = v / torch.where(total > 0, total, torch.ones_like(total))
    feasible = (w >= -1e-12).all(-1) & (total.squeeze(-1) > 0) & torch.isfinite(w).all(-1)
    w = w.clamp_min(0.0)
    w = w / w.sum(-1, keepdim=True).clamp_min(TINY)
    gw = (w.unsqueeze(-2) @ g.unsqueeze(-3)).squeeze(-2)  # [..., S, K]
    obj = (w * b.unsqueeze(-2)).sum(-1) + r * torch.sqrt((w * gw).sum(-1).clamp(min=0.0) + EPS)
    obj = torch.where(feasible, obj, torch.full_like(obj, float("inf")))
    best = obj.argmin(-1, keepdim=True)
    w_star = torch.gather(w, -2, best.unsqueeze(-1).expand(*best.shape, k)).squeeze(-2)
    gw_norm = torch.sqrt((w_star * (g @ w_star.unsqueeze(-1)).squeeze(-1)).sum(-1, keepdim=True).clamp(min=0.0))
    lam = r / gw_norm.clamp(min=TINY)
    return 1.0 / k + lam * w_star, w_star


class CAGrad(WarmStartSolver, GramianAggregator):
    """Conflict-averse gradient.

    Options: ``c`` (0.5; 0 gives the mean; MT10 uses 0.9), ``rescale`` ∈ {0, 1, 2} (1 as in the
    reference code: divide by 1 + c²; TorchJD uses 0). K ≤ 10: the dual is solved exactly
    (support enumeration). K > 10: ``max_iter`` (100) / ``tol`` (1e-10) of the iterative dual
    solver, ``warm_start`` (False): start each solve from the previous dual solution (same K),
    which cuts iterations when gradients change slowly between steps (it also makes K ≤ 10
    iterate, as MGDA does); the previous solution is then state (``w_prev``). Weights are
    invariant to a global gradient scale.
    """

    def __init__(
        self, c: float = 0.5, rescale: int = 1, max_iter: int = 100, tol: float = 1e-10, warm_start: bool = False,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        check_number("CAGrad", "c", c)
        check_choice("CAGrad", "rescale", rescale, RESCALES)
        self.c = float(c)
        self.rescale = rescale
        self._init_solver("CAGrad", max_iter, tol, warm_start)

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        # the weights are homogeneous of degree 0 in G: normalise before solving
        scale = torch.diagonal(gram).amax()
        gram = gram / torch.where(scale > 0, scale, torch.ones_like(scale))
        init = self._start(gram.shape[-1])
        if gram.shape[-1] <= EXACT_MAX_K and init is None:  # as MGDA: exact unless warm-started
            w, w_dual = cagrad_dual_exact(gram, self.c)
        else:
            w, w_dual = cagrad_dual_weights(gram, self.c, self.max_iter, self.tol, init=init)
        self._remember(w_dual)
        divisor = (1.0, 1.0 + self.c**2, 1.0 + self.c)[self.rescale]
        return (w / divisor).to(gram.dtype)

    def __repr__(self) -> str:
        return f"CAGrad(c={self.c:g}, rescale={self.rescale})"
