"""ConFIG (Liu, Chu & Thuerey, "ConFIG: Towards Conflict-free Training of Physics Informed Neural
Networks", ICLR 2025, arXiv 2408.11104, eq. 2):

    u = normalise(U⁺ w),   d = (Σ_i g_i·u) u,

U the unit rows g_i/‖g_i‖ (zero rows stay 0), w the preference (equal weights; its scale
cancels). U⁺w = Uᵀ(UUᵀ)⁺w and UUᵀ = N⁻¹GN⁻¹ (N = diag‖g_i‖) is the equilibrated Gramian, so
u = Jᵀβ/‖Jᵀβ‖ with β = N⁻¹(N⁻¹GN⁻¹)⁺w, and d = Jᵀβ · (1ᵀGβ)/(βᵀGβ): no unit-row [K, D] copy is
made. Where U⁺w = 0 (w has no part in the unit rows' span, e.g. two opposite rows) no direction
has equal cosines with every row and d = 0, the limit of nearly opposite rows.
"""

import torch

from morl.aggregators._preference import PreferenceVector
from morl.aggregators.base import GramianAggregator
from morl.solvers.min_norm import ZERO_ROW


def config_weights(gram: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Weights ([..., K], float64) of d for ``gram`` [..., K, K] and preference ``w``."""
    k = gram.shape[-1]
    g = gram.to(torch.float64)
    g = torch.where(torch.isfinite(g).all((-2, -1), keepdim=True), g, 0.0)  # eigh raises on NaN
    diag = torch.diagonal(g, dim1=-2, dim2=-1)
    nonzero = diag > ZERO_ROW
    inv_norm = torch.where(nonzero, diag.clamp_min(ZERO_ROW).rsqrt(), 0.0)
    units = g * inv_norm.unsqueeze(-1) * inv_norm.unsqueeze(-2)  # UUᵀ, zero rows stay 0
    eps = torch.finfo(gram.dtype).eps
    pinv = torch.linalg.pinv(units, rtol=k * eps, hermitian=True)
    w = w.to(g)
    pw = (pinv @ w.unsqueeze(-1)).squeeze(-1)
    beta = pw * inv_norm
    g_beta = (g @ beta.unsqueeze(-1)).squeeze(-1)
    length2 = (beta * g_beta).sum(-1, keepdim=True)  # ‖Jᵀβ‖²
    # ‖U⁺w‖² = wᵀ(UUᵀ)⁺w: w (nearly) orthogonal to the unit rows' span has no direction (e.g. g₂ = −c·g₁)
    spanned = (w * pw).sum(-1, keepdim=True) > k * eps * (w * w).sum(-1, keepdim=True)
    ok = (length2 > 0) & spanned
    safe = torch.where(ok, length2, 1.0)
    return torch.where(ok, beta * g_beta.sum(-1, keepdim=True) / safe, 0.0)


class ConFIG(PreferenceVector, GramianAggregator):
    """Conflict-free inverse gradients. Option ``pref_vector`` (None: equal weights, as the paper and
    TorchJD; d does not depend on the scale of w)."""

    _REPR = ("pref_vector",)

    def __init__(self, pref_vector=None, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self._init_preference(pref_vector)

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        return config_weights(gram, self._preference(gram.shape[-1], gram)).to(gram.dtype)
