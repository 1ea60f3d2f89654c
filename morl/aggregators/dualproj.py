"""DualProj: the preference-weighted mean gradient projected onto the dual cone of the gradients,
as GEM projects the current gradient (Lopez-Paz & Ranzato, "Gradient Episodic Memory for
Continual Learning", NeurIPS 2017, arXiv 1706.08840, eqs. 10-11), in TorchJD's form:

    d = π_J(Σ_i p_i g_i) = Jᵀv,   v = argmin_{v ≥ p} vᵀGv   (p_i = 1/K by default)

(Quinton & Rey, arXiv 2406.16232, Proposition 1), one box-constrained QP on the Gramian.
"""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_number
from morl.aggregators._preference import PreferenceVector
from morl.aggregators.base import GramianAggregator
from morl.solvers.dual_cone import EXACT_MAX_K, project_to_dual_cone, warn_if_slow, with_trace_ridge


class DualProj(PreferenceVector, GramianAggregator):
    """Projection of the mean gradient onto the dual cone {x : Jx ≥ 0}.

    Options as :class:`morl.aggregators.upgrad.UPGrad`: ``pref_vector`` (None: 1/K),
    ``reg_eps`` (0; TorchJD 1e-4), ``max_iter`` (100) and ``tol`` (1e-10) for K > 10.
    Non-conflicting, permutation invariant, positively homogeneous.
    """

    def __init__(
        self, pref_vector=None, reg_eps: float = 0.0, max_iter: int = 100, tol: float = 1e-10, check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        self._init_preference("DualProj", pref_vector)
        check_number("DualProj", "reg_eps", reg_eps)
        check_number("DualProj", "max_iter", max_iter, low=1, integer=True)
        check_number("DualProj", "tol", tol)
        self.reg_eps, self.max_iter, self.tol = float(reg_eps), max_iter, float(tol)
        self._warned_slow = False

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        k = gram.shape[-1]
        self._warned_slow = self._warned_slow or warn_if_slow("DualProj", k, 1)
        u = self._preference(k, gram, None).unsqueeze(-2)
        v, converged = project_to_dual_cone(with_trace_ridge(gram, self.reg_eps), u, self.max_iter, self.tol)
        if k > EXACT_MAX_K:
            self._count_not_converged(converged.squeeze(-1))
        return v.squeeze(-2).to(gram.dtype)

    def __repr__(self) -> str:
        return f"DualProj(pref_vector={self._pref_repr()}, reg_eps={self.reg_eps:g})"
