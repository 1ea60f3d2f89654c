"""Aligned-MTL (Senushkin et al., "Independent Component Alignment for Multi-Task Learning",
CVPR 2023, arXiv 2305.19000, Alg. 1): align the principal components of the gradients so the
linear system is well conditioned. With G = VΛVᵀ (the kept eigenpairs), Σ = Λ^{1/2},

    B = sqrt(λ_scale) · V Σ⁻¹ Vᵀ,   α = B w,   d = Jᵀα,

λ_scale the smallest kept eigenvalue (``scale_mode="min"``, the paper), their median or
their mean (``"median"``, ``"rmse"``), and w the preference (1/K, TorchJD).
"""

from __future__ import annotations

import math
from operator import mul

import torch

from morl.aggregators._checks import check_choice
from morl.aggregators._preference import PreferenceVector
from morl.aggregators._host import eigh_lists, eps, gramian_rows, one_free_gramian, weights_tensor
from morl.aggregators.base import GramianAggregator
from morl.host_reads import cpu_tensor

SCALE_MODES = ("min", "median", "rmse")


def balance_transformation(gram: torch.Tensor, scale_mode: str = "min") -> torch.Tensor:
    """B ([..., K, K], float64). Eigenvalues ≤ K ε λ_max (ε of the Gramian's dtype) are
    dropped (TorchJD's and the authors' cutoff) by a mask, not by slicing, so nothing is read
    back to the host; an all-zero G gives B = I (as TorchJD)."""
    vec, coef, any_kept = _balance_factors(gram, scale_mode)
    b = (vec * coef.unsqueeze(-2)) @ vec.transpose(-2, -1)
    eye = torch.eye(gram.shape[-1], dtype=b.dtype, device=b.device)
    return torch.where(any_kept[..., None], b, eye)


def balanced_weights(gram: torch.Tensor, pref: torch.Tensor, scale_mode: str = "min") -> torch.Tensor:
    """B w ([..., K], float64) for the preference ``pref`` ([K] or [..., K]) without forming B:
    V (c ⊙ Vᵀw), two K×K matrix-vector products where B costs a K×K×K one (0.2 ms of a 1 ms
    K = 50 weight step on a Zen 1 core)."""
    vec, coef, any_kept = _balance_factors(gram, scale_mode)
    w = pref.to(torch.float64).expand(gram.shape[:-1])
    bw = (vec @ (coef * (vec.transpose(-2, -1) @ w.unsqueeze(-1)).squeeze(-1)).unsqueeze(-1)).squeeze(-1)
    return torch.where(any_kept, bw, w)


def _balance_factors(gram: torch.Tensor, scale_mode: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(V [..., K, K], c [..., K], any eigenvalue kept [..., 1]) with B = V diag(c) Vᵀ:
    c_j = sqrt(λ_scale / λ_j) for the kept eigenvalues, 0 for the dropped ones."""
    k = gram.shape[-1]
    g = gram.to(torch.float64)
    g = torch.where(torch.isfinite(g).all((-2, -1), keepdim=True), g, torch.zeros_like(g))  # eigh raises on NaN
    lam, vec = torch.linalg.eigh(g)
    keep = lam > lam[..., -1:].clamp_min(0) * k * torch.finfo(gram.dtype).eps
    safe = torch.where(keep, lam, torch.ones_like(lam))
    inv_sqrt = torch.where(keep, safe.rsqrt(), torch.zeros_like(lam))
    scale = _scale(torch.where(keep, lam, torch.full_like(lam, float("inf"))), keep, scale_mode)
    return vec, scale.sqrt() * inv_sqrt, keep.any(-1, keepdim=True)


def _scale(kept: torch.Tensor, keep: torch.Tensor, mode: str) -> torch.Tensor:
    """[..., 1]: the smallest, (lower) median or mean of the kept eigenvalues (+inf = dropped)."""
    rank = keep.sum(-1, keepdim=True)
    ordered = kept.sort(-1).values  # kept ascending, dropped (+inf) last
    if mode == "min":
        out = ordered[..., :1]
    elif mode == "median":  # torch.median's lower median of the kept ones
        out = ordered.gather(-1, ((rank - 1) // 2).clamp_min(0))
    else:
        out = torch.where(keep, kept, torch.zeros_like(kept)).sum(-1, keepdim=True) / rank.clamp_min(1)
    return torch.where(rank > 0, out, torch.ones_like(out))


def _kept_coefficients(lam: list[float], dtype: torch.dtype, scale_mode: str) -> list[float] | None:
    """c_j = sqrt(λ_scale / λ_j) for the kept eigenvalues (``lam`` ascending, as eigh returns
    them; kept: λ_j > K ε λ_max) and 0 for the dropped ones, as floats; None when none is kept
    (B = I)."""
    cut = max(lam[-1], 0.0) * len(lam) * eps(dtype)
    values = [x for x in lam if x > cut]  # ascending
    if not values:
        return None
    if scale_mode == "min":
        scale = values[0]
    elif scale_mode == "median":
        scale = values[(len(values) - 1) // 2]
    else:
        scale = sum(values) / len(values)
    root = math.sqrt(scale)
    return [root / math.sqrt(x) if x > cut else 0.0 for x in lam]


def _aligned_host(gram: torch.Tensor, rows: list[list[float]], w: list[float], scale_mode: str) -> list[float]:
    """B w (:func:`balance_transformation`) for one small CPU Gramian: one eigh, the rest in
    Python floats: B w = Σ_j c_j v_j (v_jᵀw) over the kept λ_j (:func:`_kept_coefficients`)."""
    lam, vecs = eigh_lists(gram, rows)
    coef = _kept_coefficients(lam, gram.dtype, scale_mode)
    if coef is None:
        return list(w)  # B = I
    out = [0.0] * len(w)
    for c, e in zip(coef, vecs):
        if c:
            c *= sum(map(mul, e, w))
            out = [a + b * c for a, b in zip(out, e)]
    return out


def _aligned_cpu(gram: torch.Tensor, w: list[float], scale_mode: str) -> torch.Tensor | None:
    """B w (float64) for one CPU Gramian of more rows than the Python path takes (callers check
    ``_host.one_free_gramian`` first): its eigenvalues read as floats decide the cut and the
    scale, and V (c ⊙ Vᵀw) is two matrix-vector products: 9 ops against ~35 K-sized ones on the
    torch path (0.6 of a K = 50 weight step here). None (the torch path answers) for a
    non-finite G."""
    try:
        lam_t, vec = torch.linalg.eigh(gram.to(torch.float64))
    except torch.linalg.LinAlgError:  # LAPACK gave up (NaN/inf input): the torch path masks it
        return None
    lam = lam_t.tolist()
    if not math.isfinite(sum(lam)):
        return None
    coef = _kept_coefficients(lam, gram.dtype, scale_mode)
    pref = cpu_tensor(w, torch.float64)
    if coef is None:
        return pref  # B = I
    return vec @ (cpu_tensor(coef, torch.float64) * (pref @ vec))


class AlignedMTL(PreferenceVector, GramianAggregator):
    """Aligned-MTL. Options: ``pref_vector`` (None: 1/K, TorchJD; LibMTL uses 1, i.e. K times
    longer), ``scale_mode`` ∈ {"min", "median", "rmse"} ("min", the paper's Alg. 1).
    Permutation invariant and positively homogeneous; not non-conflicting."""

    def __init__(self, pref_vector=None, scale_mode: str = "min", check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self._init_preference("AlignedMTL", pref_vector)
        check_choice("AlignedMTL", "scale_mode", scale_mode, SCALE_MODES)
        self.scale_mode = scale_mode

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        rows = gramian_rows(gram)
        if rows is not None:  # one small CPU Gramian: in Python floats
            return weights_tensor(_aligned_host(gram, rows, self._preference_list(len(rows), gram), self.scale_mode), gram)
        if one_free_gramian(gram):  # one larger CPU Gramian: its values and the preference read as floats
            on_cpu = _aligned_cpu(gram, self._preference_list(gram.shape[-1], gram), self.scale_mode)
            if on_cpu is not None:
                return on_cpu.to(gram.dtype)
        w = self._preference(gram.shape[-1], gram, None)
        return balanced_weights(gram, w, self.scale_mode).to(gram.dtype)

    def __repr__(self) -> str:
        return f"AlignedMTL(pref_vector={self._pref_repr()}, scale_mode={self.scale_mode!r})"
