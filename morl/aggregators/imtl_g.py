"""IMTL-G (Liu et al., "Towards Impartial Multi-task Learning", ICLR 2021, Sec. 3.2, Alg. 1): the
combination d = Σ_k α_k g_k, Σ α = 1, with equal projections onto every unit gradient; in
Gramian form (TorchJD's IMTLG; Quinton & Rey, arXiv 2406.16232)  α = G⁺n / 1ᵀG⁺n, n_k = ‖g_k‖.
"""

import torch

from morl.aggregators.base import GramianAggregator

#: Σ_k (G⁺n)_k below this fraction (at least K ε) of Σ_k |(G⁺n)_k|: its sign is rounding, α = 0
SUM_GUARD = 1e-12


def imtl_g_weights(gram: torch.Tensor) -> torch.Tensor:
    """α ([..., K], float64) for ``gram`` [..., K, K]; G⁺ cuts eigenvalues below K ε λ_max."""
    k = gram.shape[-1]
    eps = torch.finfo(gram.dtype).eps
    g = gram.to(torch.float64)
    g = torch.where(torch.isfinite(g).all((-2, -1), keepdim=True), g, 0.0)  # eigh raises on NaN
    norms = torch.diagonal(g, dim1=-2, dim2=-1).clamp_min(0).sqrt()
    v = (torch.linalg.pinv(g, rtol=k * eps, hermitian=True) @ norms.unsqueeze(-1)).squeeze(-1)
    total = v.sum(-1, keepdim=True)
    ok = total.abs() > max(SUM_GUARD, k * eps) * v.abs().sum(-1, keepdim=True)
    return torch.where(ok, v / torch.where(ok, total, 1.0), 0.0)


class IMTLG(GramianAggregator):
    """Impartial MTL, gradient part. No options (as TorchJD); degenerate input gives d = 0."""

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        return imtl_g_weights(gram).to(gram.dtype)
