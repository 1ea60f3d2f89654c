"""PCD, Priority-Constrained Descent (Varam et al., TMLR 2026, arXiv 2606.29521): follow the primary
objective (row 0) while each secondary keeps a fraction τ_j of its own progress,
d̃ = argmin ½‖d − g̃₁‖² s.t. g̃_jᵀd ≥ τ_j‖g̃_j‖², on rows g̃_i = g_i / sqrt(v̂_i + ε), v̂ the
bias-corrected moving average (decay β) of ‖g_i‖²; d = d̃ rescaled to ‖g₁‖. As the paper and
TorchJD: g₁ = 0 gives d = 0; constraints no d meets together are dropped (d = g₁).
"""

import warnings

import torch

from morl.aggregators._checks import check_number
from morl.aggregators._preference import on_device
from morl.aggregators.base import GramianAggregator
from morl.solvers.priority_qp import dual_terms, solve_masked

#: from this many objectives on, a conflicting call's O(K⁴) solve takes seconds: warn once
SLOW_K = 300


class PCD(GramianAggregator):
    """PCD. Options: ``tau`` (0.02, or K − 1 values in [0, 1]), ``beta`` (0.999), ``eps`` (1e-8),
    ``max_iter`` (None: 3K + 10 active-set steps). State: ``sq_norm_ema`` [K] and ``steps``."""

    _STATE = ("sq_norm_ema", "steps")
    gramian_in_units = True  # the moving average is of ‖g_k‖² in the gradients' units
    _REPR = ("tau", "beta", "eps")

    def __init__(
        self,
        tau: float | list[float] = 0.02,
        beta: float = 0.999,
        eps: float = 1e-8,
        max_iter: int | None = None,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        taus = check_number("PCD", "tau", tau, high=1.0, many=True)
        self.tau = list(taus) if isinstance(tau, (list, tuple)) else taus[0]
        self.beta = check_number("PCD", "beta", beta, high=1.0, below=True)
        self.eps = check_number("PCD", "eps", eps)
        self.max_iter = None if max_iter is None else check_number("PCD", "max_iter", max_iter, low=1, integer=True)
        self._tau_on: dict = {}
        self._warned_slow = False

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        k = gram.shape[-1]
        g = gram.to(torch.float64)
        taus = self._taus(k, g)
        self._warn_if_slow(k)
        precision = 10.0 * torch.finfo(gram.dtype).eps
        scales = self._update_scales(torch.diagonal(g))
        normalised = g * scales.unsqueeze(-1) * scales.unsqueeze(-2)
        w = torch.ones(k, dtype=torch.float64, device=g.device)  # [1, μ]: d̃ = g̃₁ + Σ μ_j g̃_j
        if k > 1:
            a, b = dual_terms(normalised, taus)
            mu, feasible, converged = solve_masked(a, b, max(1e-9, precision), self.max_iter or 3 * k + 10)
            self._count_not_converged(converged)
            w = torch.cat([w[:1], torch.where(feasible, mu, 0.0)])  # infeasible: drop the constraints
        d_sq = w @ normalised @ w
        magnitude = (w.abs() @ torch.diagonal(normalised).sqrt()).square()
        ok = (g[0, 0] > 0) & (d_sq > precision * magnitude)  # else d̃ = 0 up to the Gramian's rounding
        w = torch.where(ok, w * scales * torch.sqrt(g[0, 0] / torch.where(ok, d_sq, 1.0)), 0.0)
        return w.to(gram.dtype)

    def _taus(self, k: int, like: torch.Tensor) -> torch.Tensor:
        if not isinstance(self.tau, list):
            return torch.full((k - 1,), self.tau, dtype=like.dtype, device=like.device)
        if len(self.tau) != k - 1:
            raise ValueError(
                f"PCD option tau has {len(self.tau)} values; allowed: one per secondary objective ({k - 1} for K = {k})"
            )
        return on_device(self._tau_on, self.tau, like)

    def _warn_if_slow(self, k: int) -> None:
        if k >= SLOW_K and not self._warned_slow:
            self._warned_slow = True
            steps, n = self.max_iter or 3 * k + 10, k - 1
            warnings.warn(
                f"PCD with K={k} objectives: a call with conflicting gradients takes up to {steps} active-set "
                f"steps, each solving a {n}x{n} system (~{steps * 2 * n**3 / 3:.0e} flop: seconds or more a call); "
                "max_iter caps the steps",
                UserWarning,
                stacklevel=4,
            )

    def _update_scales(self, sq_norms: torch.Tensor) -> torch.Tensor:
        """s = 1/sqrt(v̂ + ε) after this call's ‖g_i‖² enters the average (0 where v̂ + ε = 0)."""
        ema = self.beta * self._get("sq_norm_ema", sq_norms) + (1.0 - self.beta) * sq_norms
        steps = torch.ones((), dtype=torch.int64, device=ema.device) if self.steps is None else self.steps + 1
        denominators = torch.sqrt(ema / (1.0 - torch.pow(self.beta, steps.to(torch.float64))) + self.eps)
        self.sq_norm_ema, self.steps = ema, steps
        return torch.where(denominators > 0, 1.0 / denominators, 0.0)
