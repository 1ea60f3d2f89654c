"""DualProj: the preference-weighted mean gradient projected onto the dual cone of the gradients,
as GEM projects its gradient (Lopez-Paz & Ranzato, NeurIPS 2017, arXiv 1706.08840, eqs. 10-11),
in TorchJD's form (Quinton & Rey, arXiv 2406.16232, Proposition 1):

    d = π_J(Σ_i p_i g_i) = Jᵀv,   v = argmin_{v ≥ p} vᵀGv   (p_i = 1/K by default).
"""

from __future__ import annotations

import torch

from morl.aggregators.upgrad import UPGrad
from morl.solvers.dual_cone import EXACT_MAX_K, project_to_dual_cone, warn_if_slow, with_trace_ridge


class DualProj(UPGrad):
    """Projection of the mean gradient onto the dual cone {x : Jx ≥ 0}; options as UPGrad's."""

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        k = gram.shape[-1]
        self._warned_slow = self._warned_slow or warn_if_slow("DualProj", k, 1)
        u = self._preference(k, gram).unsqueeze(-2)
        v, converged = project_to_dual_cone(with_trace_ridge(gram, self.reg_eps), u, self.max_iter, self.tol)
        if k > EXACT_MAX_K:
            self._count_not_converged(converged.squeeze(-1))
        return v.squeeze(-2).to(gram.dtype)
