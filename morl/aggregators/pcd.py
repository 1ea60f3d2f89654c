"""PCD, Priority-Constrained Descent (Varam et al., "Not All Objectives Are Born Equal:
Priority-Constrained Descent for Hierarchical Multi-Objective Optimization", TMLR 2026,
arXiv 2606.29521): follow the primary objective's gradient as closely as possible while
every secondary objective keeps a fraction τ of the first-order progress its own normalised
gradient would give,

    d̃ = argmin_d ½‖d − g̃₁‖²   s.t.   g̃_jᵀd ≥ τ_j‖g̃_j‖²   (j = 2..K),

on normalised rows g̃_i = s_i g_i, s_i = 1/sqrt(v̂_i + ε), v̂_i the bias-corrected exponential
moving average (decay β) of ‖g_i‖² over the calls. The output is d̃ rescaled to ‖g₁‖. Row 0
of the input is the primary objective. The QP is solved exactly on the Gramian
(:mod:`morl.solvers.priority_qp`); its weights are d = Σ_i w_i g_i with w = s ∘ [1, μ] times
the rescaling.

Special cases, as the paper and TorchJD: g₁ = 0 gives d = 0; constraints that no d meets
together (K ≥ 3, e.g. two opposite secondary gradients) are dropped, d = g₁; d̃ = 0 up to the
Gramian's rounding gives d = 0.
"""

from __future__ import annotations

import math

import torch

from morl.aggregators._checks import check_number
from morl.aggregators._host import as_list, eps, gramian_rows, weights_tensor
from morl.aggregators.base import GramianAggregator
from morl.solvers.priority_qp import dual_terms, solve, solve_host


class PCD(GramianAggregator):
    """Priority-constrained descent; row 0 is the primary objective.

    Options: ``tau`` (0.02; one fraction in [0, 1] for every secondary objective, or a list of
    K − 1), ``beta`` (0.999, in [0, 1)), ``eps`` (1e-8) and ``max_iter`` (None: 3K + 10 steps
    of the active-set solver; it stops when done on the CPU, and an unfinished solve counts in
    ``not_converged``). State (buffers): ``sq_norm_ema`` [K] (float64) and ``steps``.
    """

    gramian_in_units = True  # the moving average is of ‖g_k‖² in the gradients' units

    def __init__(
        self, tau: float | list[float] = 0.02, beta: float = 0.999, eps: float = 1e-8, max_iter: int | None = None,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        taus = list(tau) if isinstance(tau, (list, tuple)) else [tau]
        for value in taus:
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0):
                raise ValueError(f"PCD option tau={tau!r} is not valid; allowed: a number in [0, 1] or a list of them")
        if not (isinstance(beta, (int, float)) and not isinstance(beta, bool) and 0.0 <= beta < 1.0):
            raise ValueError(f"PCD option beta={beta!r} is not valid; allowed: a number in [0, 1)")
        check_number("PCD", "eps", eps)
        if max_iter is not None:
            check_number("PCD", "max_iter", max_iter, low=1, integer=True)
        self.tau = [float(v) for v in tau] if isinstance(tau, (list, tuple)) else float(tau)
        self.beta, self.eps, self.max_iter = float(beta), float(eps), max_iter
        self.register_buffer("sq_norm_ema", None)
        self.register_buffer("steps", None)

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        """Weights for ``gram`` = J Jᵀ ([K, K], the gradients' units); updates the average."""
        k = gram.shape[-1]
        precision = 10.0 * eps(gram.dtype)
        dependence_tol = max(1e-9, precision)
        max_iter = self.max_iter or 3 * k + 10
        rows = gramian_rows(gram) if self._state_on(gram.device) else None
        if rows is not None:  # one small CPU Gramian: all in Python floats
            return self._host_weights(rows, self._tau_list(k), precision, dependence_tol, max_iter, gram)
        taus = self._tau_tensor(k, gram.device)
        g = gram.to(torch.float64)
        scales = self._update_scales(torch.diagonal(g))
        normalised = g * scales.unsqueeze(-1) * scales.unsqueeze(-2)
        a, b = dual_terms(normalised, taus)
        multipliers = b  # K = 1: empty, no secondary objective
        if k > 1:
            mu, feasible, converged = solve(a, b, dependence_tol, max_iter)
            self._count_not_converged(converged)
            multipliers = torch.where(feasible, mu, 0.0)
        w = torch.cat([torch.ones(1, dtype=torch.float64, device=g.device), multipliers])
        d_sq = w @ normalised @ w
        magnitude = (w.abs() @ torch.diagonal(normalised).sqrt()).square()
        ok = (g[0, 0] > 0) & (d_sq > precision * magnitude)
        w = torch.where(ok, w * scales * torch.sqrt(g[0, 0] / torch.where(ok, d_sq, 1.0)), 0.0)
        return w.to(gram.dtype)

    def _host_weights(self, rows, taus, precision, dependence_tol, max_iter, like) -> torch.Tensor:
        """The Python-float path of :meth:`weights_from_gramian` (one small CPU Gramian): the same
        average, QP and rescaling, without ~40 torch ops on K-sized tensors."""
        k = len(rows)
        scales = self._update_scales_host([rows[i][i] for i in range(k)], like)
        g = [[rows[i][j] * scales[i] * scales[j] for j in range(k)] for i in range(k)]
        a = [row[1:] for row in g[1:]]
        b = [t * a[j][j] - g[j + 1][0] for j, t in enumerate(taus)]
        mu, converged = solve_host(a, b, dependence_tol, max_iter) if k > 1 else ([], True)
        if not converged:
            self._count_not_converged(torch.zeros((), dtype=torch.bool))
        w = [1.0] + (mu if mu is not None else [0.0] * (k - 1))
        d_sq = sum(wi * wj * g[i][j] for i, wi in enumerate(w) for j, wj in enumerate(w))
        magnitude = sum(abs(wi) * math.sqrt(g[i][i]) for i, wi in enumerate(w)) ** 2
        if not (rows[0][0] > 0 and d_sq > precision * magnitude):
            return weights_tensor([0.0] * k, like)
        factor = math.sqrt(rows[0][0] / d_sq)
        return weights_tensor([wi * si * factor for wi, si in zip(w, scales)], like)

    def _state_on(self, device: torch.device) -> bool:
        """The average is absent or on ``device`` (a state moved elsewhere takes the torch path)."""
        return self.sq_norm_ema is None or self.sq_norm_ema.device == device

    def _tau_list(self, k: int) -> list[float]:
        if isinstance(self.tau, list):
            if len(self.tau) != k - 1:
                raise ValueError(f"PCD option tau has {len(self.tau)} values; allowed: one per secondary objective ({k - 1} for K = {k})")
            return self.tau
        return [self.tau] * (k - 1)

    def _tau_tensor(self, k: int, device: torch.device) -> torch.Tensor:
        """[K − 1] float64 τ on ``device``: a fill for one τ; a list is copied to a device once
        and cached (a call never copies host→device)."""
        taus = self._tau_list(k)
        if not isinstance(self.tau, list):
            return torch.full((k - 1,), self.tau, dtype=torch.float64, device=device)
        cached = self.__dict__.get("_tau_on")
        if cached is None or cached[0] != device:
            cached = (device, torch.tensor(taus, dtype=torch.float64).to(device))
            self.__dict__["_tau_on"] = cached
        return cached[1]

    def _update_scales(self, sq_norms: torch.Tensor) -> torch.Tensor:
        """s = 1/sqrt(v̂ + ε) after the average takes this call's ‖g_i‖² (0 where v̂ + ε = 0: a
        row that was always zero, with ε = 0)."""
        ema, steps = self.sq_norm_ema, self.steps
        if ema is None:
            ema = torch.zeros_like(sq_norms)
            steps = torch.zeros((), dtype=torch.int64, device=sq_norms.device)
        elif ema.shape != sq_norms.shape:
            _raise_shape_change(ema.shape[0], sq_norms.shape[0])
        ema = self.beta * ema.to(sq_norms) + (1.0 - self.beta) * sq_norms
        steps = steps + 1
        denominators = torch.sqrt(ema / (1.0 - torch.pow(self.beta, steps.to(torch.float64))) + self.eps)
        self.sq_norm_ema, self.steps = ema, steps
        return torch.where(denominators > 0, 1.0 / denominators, 0.0)

    def _update_scales_host(self, sq_norms: list[float], like: torch.Tensor) -> list[float]:
        """:meth:`_update_scales` in Python floats, for the CPU path."""
        ema, steps = ([0.0] * len(sq_norms), 0) if self.sq_norm_ema is None else (as_list(self.sq_norm_ema), as_list(self.steps))
        if len(ema) != len(sq_norms):
            _raise_shape_change(len(ema), len(sq_norms))
        ema = [self.beta * e + (1.0 - self.beta) * sq for e, sq in zip(ema, sq_norms)]
        steps += 1
        # the registered buffers, set past nn.Module.__setattr__ (~15 µs a call here)
        self._buffers["sq_norm_ema"] = weights_tensor(ema, like, torch.float64)
        self._buffers["steps"] = torch.full((), steps, dtype=torch.int64)
        correction = 1.0 - self.beta**steps
        denominators = [math.sqrt(e / correction + self.eps) for e in ema]
        return [1.0 / den if den > 0 else 0.0 for den in denominators]

    def __repr__(self) -> str:
        return f"PCD(tau={self.tau!r}, beta={self.beta:g}, eps={self.eps:g})"


def _raise_shape_change(held: int, got: int) -> None:
    raise ValueError(f"PCD holds averages for {held} objectives but got {got}; call reset() to start over")
