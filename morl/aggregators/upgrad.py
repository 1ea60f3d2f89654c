"""UPGrad (Quinton & Rey, "Jacobian Descent for Multi-Objective Optimization", arXiv 2406.16232,
eq. 5 and Proposition 1): project each gradient onto the dual cone of all of them, then average,
d = Σ_i p_i π_J(g_i) = Jᵀ Σ_i v_i, v_i = argmin_{v ≥ p_i e_i} vᵀGv (:mod:`morl.solvers.dual_cone`).
"""

import torch

from morl.aggregators._checks import check_number
from morl.aggregators._preference import PreferenceVector
from morl.aggregators.base import GramianAggregator
from morl.solvers.dual_cone import EXACT_MAX_K, project_to_dual_cone, warn_if_slow, with_trace_ridge


class UPGrad(PreferenceVector, GramianAggregator):
    """Unconflicting projection of gradients.

    Options: ``pref_vector`` (None: 1/K, TorchJD), ``reg_eps`` (0: exact; TorchJD's 1e-4 adds
    1e-4·tr(G) to G's diagonal), and for K > 5 (active-set steps) ``max_iter`` (100; at least 2K + 10 rounds run) and
    ``tol`` (1e-10, the relative multiplier below which an active row is freed).
    """

    _REPR = ("pref_vector", "reg_eps")

    def __init__(
        self,
        pref_vector=None,
        reg_eps: float = 0.0,
        max_iter: int = 100,
        tol: float = 1e-10,
        check_finite: str = "raise",
    ) -> None:
        super().__init__(check_finite=check_finite)
        name = type(self).__name__
        self._init_preference(pref_vector)
        self.reg_eps = check_number(name, "reg_eps", reg_eps)
        self.max_iter = check_number(name, "max_iter", max_iter, low=1, integer=True)
        self.tol = check_number(name, "tol", tol)
        self._warned_slow = False

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        k = gram.shape[-1]
        u = self._lower_bounds(self._preference(k, gram))
        self._warned_slow = self._warned_slow or warn_if_slow(type(self).__name__, k, u.shape[-2])
        v, converged = project_to_dual_cone(with_trace_ridge(gram, self.reg_eps), u, self.max_iter, self.tol)
        if k > EXACT_MAX_K:
            self._count_not_converged(converged.all(-1))
        return v.sum(-2).to(gram.dtype)

    @staticmethod
    def _lower_bounds(p: torch.Tensor) -> torch.Tensor:
        """The rows u of the projections argmin_{v ≥ u} vᵀGv: p_i e_i, one per gradient."""
        return torch.diag_embed(p)
