"""DualProj: the preference-weighted mean gradient projected onto the dual cone of the gradients,
as GEM projects its gradient (Lopez-Paz & Ranzato, NeurIPS 2017, arXiv 1706.08840, eqs. 10-11),
in TorchJD's form (Quinton & Rey, arXiv 2406.16232, Proposition 1):

    d = π_J(Σ_i p_i g_i) = Jᵀv,   v = argmin_{v ≥ p} vᵀGv   (p_i = 1/K by default).
"""

import torch

from morl.aggregators.upgrad import UPGrad


class DualProj(UPGrad):
    """Projection of the mean gradient onto the dual cone {x : Jx ≥ 0}; options as UPGrad's."""

    @staticmethod
    def _lower_bounds(p: torch.Tensor) -> torch.Tensor:
        return p.unsqueeze(-2)  # one projection, of Σ_i p_i g_i
