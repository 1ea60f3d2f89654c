"""CAGrad (Liu et al. 2021): conflict-averse gradient descent.

Primal: maximise min_i g_i·d over the ball ‖d − g0‖ ≤ c‖g0‖ around the mean gradient g0.
Dual over the simplex (what the reference code solves):

    w* = argmin_{w∈Δ_K} g_w·g0 + c‖g0‖ ‖g_w‖,   g_w = Σ_k w_k g_k,
    d  = g0 + (c‖g0‖ / ‖g_w*‖) g_w*,

then divided by 1 (rescale=0), 1 + c² (rescale=1, the reference default) or 1 + c (rescale=2).
Only inner products enter, so the dual is solved on the K×K Gramian, in torch, by accelerated
projected gradient with a masked line search (no scipy, no host sync).
"""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_choice, check_number
from morl.aggregators._warm_start import WarmStartSolver
from morl.aggregators.base import GramianAggregator
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


class CAGrad(WarmStartSolver, GramianAggregator):
    """Conflict-averse gradient.

    Options: ``c`` (0.5; 0 gives the mean; MT10 uses 0.9), ``rescale`` ∈ {0, 1, 2} (1 as in the
    reference code: divide by 1 + c²; TorchJD uses 0), ``max_iter`` (100) / ``tol`` (1e-10) of
    the dual solver, ``warm_start`` (False): start each solve from the previous dual solution
    (same K), which cuts iterations when gradients change slowly between steps; the previous
    solution is then state (``w_prev``). Weights are invariant to a global gradient scale.
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
        w, w_dual = cagrad_dual_weights(gram, self.c, self.max_iter, self.tol, init=self._start(gram.shape[-1]))
        self._remember(w_dual)
        divisor = (1.0, 1.0 + self.c**2, 1.0 + self.c)[self.rescale]
        return (w / divisor).to(gram.dtype)

    def __repr__(self) -> str:
        return f"CAGrad(c={self.c:g}, rescale={self.rescale})"
