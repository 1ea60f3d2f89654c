"""IMTL-G (Liu et al., "Towards Impartial Multi-task Learning", ICLR 2021, Sec. 3.2 and Alg. 1):
the combination d = Σ_k α_k g_k, Σ_k α_k = 1, whose projections onto every unit gradient are
equal, d·g_k/‖g_k‖ = const. With n_k = ‖g_k‖ that is Gα ∝ n, so (Gramian form, TorchJD's IMTLG,
generalised to dependent rows by Quinton & Rey, arXiv 2406.16232)

    α = G⁺n / 1ᵀG⁺n.
"""

from __future__ import annotations

import math
from operator import mul

import torch

from morl.aggregators._host import eigh_lists, eps, gramian_rows, weights_tensor
from morl.aggregators.base import GramianAggregator

#: Σ_k (G⁺n)_k below this fraction of Σ_k |(G⁺n)_k| gives zero weights (no finite
#: normalisation); at least K ε of the Gramian's dtype, the rounding of that sum, below which
#: even its sign (the direction's) is unknown (in float32, ~1e-6 instead of weights of ~1e7).
SUM_GUARD = 1e-12


def _sum_guard(k: int, dtype: torch.dtype) -> float:
    return max(SUM_GUARD, k * eps(dtype))


def imtl_g_weights(gram: torch.Tensor) -> torch.Tensor:
    """α ([..., K], float64) for ``gram`` [..., K, K]. G⁺ cuts eigenvalues below K ε λ_max
    (ε of the Gramian's dtype: smaller ones are rounding, not directions), as TorchJD's pinv."""
    k = gram.shape[-1]
    g = gram.to(torch.float64)
    g = torch.where(torch.isfinite(g).all((-2, -1), keepdim=True), g, torch.zeros_like(g))  # eigh raises on NaN
    norms = torch.diagonal(g, dim1=-2, dim2=-1).clamp_min(0).sqrt()
    v = (torch.linalg.pinv(g, rtol=k * torch.finfo(gram.dtype).eps, hermitian=True) @ norms.unsqueeze(-1)).squeeze(-1)
    total = v.sum(-1, keepdim=True)
    ok = total.abs() > _sum_guard(k, gram.dtype) * v.abs().sum(-1, keepdim=True)
    return torch.where(ok, v / torch.where(ok, total, torch.ones_like(total)), torch.zeros_like(v))


def _imtl_g_host(gram: torch.Tensor, rows: list[list[float]]) -> list[float]:
    """:func:`imtl_g_weights` for one small CPU Gramian: one eigh, the rest in Python floats
    (G⁺n = Σ_j v_j (v_jᵀn) / λ_j over the eigenvalues pinv keeps, |λ_j| > K ε max|λ|)."""
    k = len(rows)
    lam, vecs = eigh_lists(gram, rows)
    norms = [math.sqrt(max(rows[i][i], 0.0)) for i in range(k)]
    cut = k * eps(gram.dtype) * max(map(abs, lam))
    v = [0.0] * k
    for lam_j, e in zip(lam, vecs):
        if abs(lam_j) > cut:
            coef = sum(map(mul, e, norms)) / lam_j
            v = [a + b * coef for a, b in zip(v, e)]
    total = sum(v)
    if not abs(total) > _sum_guard(k, gram.dtype) * sum(abs(x) for x in v):
        return [0.0] * k
    return [x / total for x in v]


class IMTLG(GramianAggregator):
    """Impartial MTL, gradient part. No options (as TorchJD). The weights sum to 1 and do not
    depend on the gradients' scale; weights may be negative, so d can conflict with a row.
    All-zero or degenerate input (Σ G⁺n ≈ 0) gives d = 0."""

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        rows = gramian_rows(gram)
        if rows is not None:  # one small CPU Gramian: in Python floats (morl.aggregators._host)
            return weights_tensor(_imtl_g_host(gram, rows), gram)
        return imtl_g_weights(gram).to(gram.dtype)

    def __repr__(self) -> str:
        return "IMTLG()"
