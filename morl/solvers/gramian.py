"""Forming and scaling K×K Gramians, so solvers see numbers of order one at any gradient scale."""

import torch


def gramian(grads: torch.Tensor) -> torch.Tensor:
    """``grads @ grads.T`` ([..., K, K], input dtype; inf on overflow, which ``check_finite`` reports)."""
    return grads @ grads.mT


def gram_scale(gram: torch.Tensor) -> torch.Tensor:
    """Largest diagonal entry ``[..., 1, 1]`` (1 where 0 or tiny): the simplex problems are homogeneous in G."""
    s = torch.diagonal(gram, dim1=-2, dim2=-1).amax(dim=-1, keepdim=True).unsqueeze(-1)
    return torch.where(s > torch.finfo(gram.dtype).tiny ** 0.5, s, 1.0)


def normalized_gramian(
    grads: torch.Tensor, dtype: torch.dtype | None = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(G / s, s)`` for the rows of ``grads`` [..., K, D], G cast to ``dtype`` (None: the input's), s [...] from :func:`gram_scale`."""
    gram = gramian(grads).to(dtype)  # .to(None) keeps the input's dtype
    s = gram_scale(gram)
    return gram / s, s.squeeze(-1).squeeze(-1)


def definite_ridge(gram: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``2δ`` [..., 1, 1], δ = max(−λ_min(D⁻¹GD⁻¹), ε/16) (D² = diag G, ε of ``dtype``): G + 2δD² is
    positive definite where a singular G rounded to ``dtype`` is indefinite."""
    diag = torch.diagonal(gram, dim1=-2, dim2=-1)
    d = torch.where(diag > 0, diag, 1.0).sqrt()
    unit = gram / (d.unsqueeze(-1) * d.unsqueeze(-2))
    unit = torch.where(torch.isfinite(unit), unit, 0.0)
    return 2 * (-torch.linalg.eigvalsh(unit)[..., :1].unsqueeze(-1)).clamp(min=torch.finfo(dtype).eps / 16)
