"""IMTL-G (Liu et al., "Towards Impartial Multi-task Learning", ICLR 2021, Sec. 3.2 and Alg. 1):
the combination d = Σ_k α_k g_k, Σ_k α_k = 1, whose projections onto every unit gradient are
equal, d·g_k/‖g_k‖ = const. With n_k = ‖g_k‖ that is Gα ∝ n, so (Gramian form, TorchJD's IMTLG,
generalised to dependent rows by Quinton & Rey, arXiv 2406.16232)

    α = G⁺n / 1ᵀG⁺n.
"""

from __future__ import annotations

import torch

from morl.aggregators.base import GramianAggregator

#: Σ_k (G⁺n)_k below this fraction of Σ_k |(G⁺n)_k| gives zero weights (no finite
#: normalisation); at least K ε of the Gramian's dtype, the rounding of that sum, below which
#: even its sign (the direction's) is unknown (in float32, ~1e-6 instead of weights of ~1e7).
SUM_GUARD = 1e-12


def imtl_g_weights(gram: torch.Tensor) -> torch.Tensor:
    """α ([..., K], float64) for ``gram`` [..., K, K]. G⁺ cuts eigenvalues below K ε λ_max
    (ε of the Gramian's dtype: smaller ones are rounding, not directions), as TorchJD's pinv."""
    k = gram.shape[-1]
    eps = torch.finfo(gram.dtype).eps
    g = gram.to(torch.float64)
    g = torch.where(torch.isfinite(g).all((-2, -1), keepdim=True), g, torch.zeros_like(g))  # eigh raises on NaN
    norms = torch.diagonal(g, dim1=-2, dim2=-1).clamp_min(0).sqrt()
    v = (torch.linalg.pinv(g, rtol=k * eps, hermitian=True) @ norms.unsqueeze(-1)).squeeze(-1)
    total = v.sum(-1, keepdim=True)
    ok = total.abs() > max(SUM_GUARD, k * eps) * v.abs().sum(-1, keepdim=True)
    return torch.where(ok, v / torch.where(ok, total, torch.ones_like(total)), torch.zeros_like(v))


class IMTLG(GramianAggregator):
    """Impartial MTL, gradient part. No options (as TorchJD). The weights sum to 1 and do not
    depend on the gradients' scale; weights may be negative, so d can conflict with a row.
    All-zero or degenerate input (Σ G⁺n ≈ 0) gives d = 0."""

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        return imtl_g_weights(gram).to(gram.dtype)

    def __repr__(self) -> str:
        return "IMTLG()"
