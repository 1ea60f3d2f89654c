"""Aligned-MTL (Senushkin et al., CVPR 2023, arXiv 2305.19000, Alg. 1): align the principal
components of the gradients. With G = VΛVᵀ (the kept eigenpairs),

    B = sqrt(λ_scale) · V Λ^{-1/2} Vᵀ,   α = B w,   d = Jᵀα,

λ_scale the smallest kept eigenvalue ("min", the paper), their median or mean, w the preference.
"""

import torch

from morl.aggregators._checks import check_choice
from morl.aggregators._preference import PreferenceVector
from morl.aggregators.base import GramianAggregator

SCALE_MODES = ("min", "median", "rmse")


def balance_transformation(gram: torch.Tensor, scale_mode: str = "min") -> torch.Tensor:
    """B ([..., K, K], float64); eigenvalues ≤ K ε λ_max are dropped (TorchJD's and the authors'
    cutoff) by a mask; an all-zero G gives B = I (as TorchJD)."""
    k = gram.shape[-1]
    g = gram.to(torch.float64)
    g = torch.where(torch.isfinite(g).all((-2, -1), keepdim=True), g, 0.0)  # eigh raises on NaN
    lam, vec = torch.linalg.eigh(g)
    keep = lam > lam[..., -1:].clamp_min(0) * k * torch.finfo(gram.dtype).eps
    inv_sqrt = torch.where(keep, torch.where(keep, lam, 1.0).rsqrt(), 0.0)
    scale = _scale(torch.where(keep, lam, float("inf")), keep, scale_mode)
    b = (vec * (scale.sqrt() * inv_sqrt).unsqueeze(-2)) @ vec.mT
    eye = torch.eye(k, dtype=b.dtype, device=b.device)
    return torch.where(keep.any(-1)[..., None, None], b, eye)


def _scale(kept: torch.Tensor, keep: torch.Tensor, mode: str) -> torch.Tensor:
    """[..., 1]: the smallest, (lower) median or mean of the kept eigenvalues (+inf = dropped);
    with none kept, B = I replaces whatever it gives."""
    rank = keep.sum(-1, keepdim=True)
    ordered = kept.sort(-1).values  # kept ascending, dropped (+inf) last
    if mode == "min":
        return ordered[..., :1]
    if mode == "median":  # torch.median's lower median of the kept ones
        return ordered.gather(-1, ((rank - 1) // 2).clamp_min(0))
    return torch.where(keep, kept, 0.0).sum(-1, keepdim=True) / rank.clamp_min(1)


class AlignedMTL(PreferenceVector, GramianAggregator):
    """Aligned-MTL. Options: ``pref_vector`` (None: 1/K, TorchJD), ``scale_mode`` ("min", the
    paper; "median", "rmse")."""

    _REPR = ("pref_vector", "scale_mode")

    def __init__(self, pref_vector=None, scale_mode: str = "min", check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        self._init_preference(pref_vector)
        check_choice("AlignedMTL", "scale_mode", scale_mode, SCALE_MODES)
        self.scale_mode = scale_mode

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        w = self._preference(gram.shape[-1], gram).to(torch.float64)
        return (balance_transformation(gram, self.scale_mode) @ w).to(gram.dtype)
