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

from morl.aggregators._host import as_list, eigh_lists, eps, gramian_rows, inverse_factor, inverse_lists, weights_tensor
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
    """:func:`imtl_g_weights` for one small CPU Gramian, in Python floats after one LAPACK call:
    G⁻¹n from a Cholesky factor where that is certified to be pinv's G⁺n (:func:`_inverse_rows`),
    else one eigh (G⁺n = Σ_j v_j (v_jᵀn) / λ_j over the eigenvalues pinv keeps,
    |λ_j| > K ε max|λ|)."""
    k = len(rows)
    norms = [math.sqrt(max(rows[i][i], 0.0)) for i in range(k)]
    inverse = _inverse_rows(gram, rows) if k > 2 else None  # K = 2: eigh_2x2 is cheaper
    if inverse is not None:
        v = [sum(map(mul, row, norms)) for row in inverse]
    else:
        lam, vecs = eigh_lists(gram, rows)
        cut = k * eps(gram.dtype) * max(map(abs, lam))
        v = [0.0] * k
        for lam_j, e in zip(lam, vecs):
            if abs(lam_j) > cut:
                coef = sum(map(mul, e, norms)) / lam_j
                v = [a + b * coef for a, b in zip(v, e)]
    return _normalised(v, gram.dtype)


def _inverse_rows(gram: torch.Tensor, rows: list[list[float]]) -> list[list[float]] | None:
    """G⁻¹ (float64 rows) when pinv would keep every eigenvalue, else None. From the Cholesky
    factor: 1/λ_min ≤ Σ_i 1/λ_i = tr G⁻¹ and λ_max ≤ tr G, so tr G · tr G⁻¹ < 1/(2K ε) proves
    λ_min > 2 K ε λ_max, twice pinv's cut: G⁺ = G⁻¹ there, and the computed inverse is accurate
    to ~K κ ε₆₄ ≤ 1e-9 of itself. At K = 10 this costs 15 µs against 25 for eigh and its lists;
    a Gramian it declines (rank-deficient or κ ≳ 1/(2K ε)) costs ~8 µs more."""
    k = len(rows)
    inverse = inverse_lists(gram)
    if inverse is None:  # not positive definite in float64: rank-deficient, pinv decides
        return None
    trace, trace_inv = sum(rows[i][i] for i in range(k)), sum(inverse[i][i] for i in range(k))
    return inverse if _pinv_is_inverse(k, gram.dtype, trace, trace_inv) else None


def _pinv_is_inverse(k: int, dtype: torch.dtype, trace: float, trace_inv: float) -> bool:
    """The certificate of :func:`_inverse_rows` (False for a NaN or infinite trace)."""
    return 2.0 * k * eps(dtype) * trace * trace_inv < 1.0


def _imtl_g_inverted(gram: torch.Tensor) -> list[float] | None:
    """:func:`imtl_g_weights` for one CPU Gramian of more rows than the Python path takes, as
    L⁻ᵀ(L⁻¹n) from the Cholesky factor where :func:`_pinv_is_inverse` certifies it; else None.
    Two triangular K×K solves instead of pinv's eigendecomposition: at K = 50 on a Zen 1 core
    ~0.15 ms against ~1 ms for the pinv route and its ~18 K×K ops (session 16)."""
    found = inverse_factor(gram)
    if found is None:
        return None
    inverse, diagonal, trace, trace_inv = found
    if not _pinv_is_inverse(gram.shape[-1], gram.dtype, trace, trace_inv):
        return None
    norms = diagonal.sqrt()  # G is positive definite here: every G_kk > 0
    return _normalised(as_list(inverse.T @ (inverse @ norms)), gram.dtype)


def _normalised(v: list[float], dtype: torch.dtype) -> list[float]:
    """v / Σv, or zeros where Σv is below the rounding of its terms (:data:`SUM_GUARD`)."""
    total = sum(v)
    if not abs(total) > _sum_guard(len(v), dtype) * sum(abs(x) for x in v):
        return [0.0] * len(v)
    return [x / total for x in v]


class IMTLG(GramianAggregator):
    """Impartial MTL, gradient part. No options (as TorchJD). The weights sum to 1 and do not
    depend on the gradients' scale; weights may be negative, so d can conflict with a row.
    All-zero or degenerate input (Σ G⁺n ≈ 0) gives d = 0."""

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        rows = gramian_rows(gram)
        if rows is not None:  # one small CPU Gramian: in Python floats (morl.aggregators._host)
            return weights_tensor(_imtl_g_host(gram, rows), gram)
        inverted = _imtl_g_inverted(gram)  # one larger CPU Gramian, certified invertible
        if inverted is not None:
            return weights_tensor(inverted, gram)
        return imtl_g_weights(gram).to(gram.dtype)

    def __repr__(self) -> str:
        return "IMTLG()"
