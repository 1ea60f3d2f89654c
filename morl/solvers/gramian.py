"""Forming and scaling K×K Gramians, so solvers see numbers of order one at any gradient scale."""

from __future__ import annotations

import torch


def gramian(grads: torch.Tensor) -> torch.Tensor:
    """``grads @ grads.T`` ([..., K, K], in the input's dtype): one product on every device.

    No rescaled copy is made: float32 rows whose entries lie between ~1e-12 and ~1e12 give a
    finite, normal-range Gramian. Beyond that the product overflows to inf, which the
    aggregator's ``check_finite`` policy reports (or zeroes) like any non-finite step.
    """
    return grads @ grads.mT


def gram_scale(gram: torch.Tensor) -> torch.Tensor:
    """Largest diagonal entry of ``gram`` ([..., K, K]) as ``[..., 1, 1]``; 1 where it is 0 or tiny.

    Dividing by it leaves every solution on the simplex unchanged (the objectives are
    homogeneous in G) while keeping iterations away from under/overflow.
    """
    s = torch.diagonal(gram, dim1=-2, dim2=-1).amax(dim=-1, keepdim=True).unsqueeze(-1)
    tiny = torch.finfo(gram.dtype).tiny ** 0.5
    return torch.where(s > tiny, s, torch.ones_like(s))


def normalized_gramian(grads: torch.Tensor, dtype: torch.dtype | None = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """``(G / s, s)`` for the rows of ``grads`` ([..., K, D]), s the largest diagonal entry of G.

    Only the K×K result is cast to ``dtype`` (None keeps the input's dtype, so solvers can tell
    how precise G is). ``s`` ([...], 0-d for one matrix) is the scale to multiply back (1 for an
    all-zero matrix). Leading dimensions batch independent problems (e.g. m particles).
    """
    gram = gramian(grads)
    if dtype is not None:
        gram = gram.to(dtype)
    s = gram_scale(gram)
    return gram / s, s.squeeze(-1).squeeze(-1)


def definite_ridge(gram: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``2δ`` ([..., 1, 1]) with D⁻¹GD⁻¹ + δI positive semi-definite, D² = diag G: G + 2δD² is then
    positive definite, by δ in units of each row's norm. δ = max(−λ_min(D⁻¹GD⁻¹), ε/16), ε of
    ``dtype``.

    A Gramian is known to the rounding of ``dtype`` relative to its rows, so a singular G comes
    out indefinite; convex objectives in sqrt(wᵀGw) then grow spurious stationary points. The
    exact eigenvalue makes the ridge move continuously with that rounding (a ladder of rungs
    would jump with the row order). Non-finite entries are zeroed for the eigensolver only:
    the solve that uses the ridge sees them anyway.
    """
    diag = torch.diagonal(gram, dim1=-2, dim2=-1)
    d = torch.where(diag > 0, diag, torch.ones_like(diag)).sqrt()
    unit = gram / (d.unsqueeze(-1) * d.unsqueeze(-2))
    unit = torch.where(torch.isfinite(unit), unit, torch.zeros_like(unit))
    low = torch.linalg.eigvalsh(unit)[..., :1].unsqueeze(-1)
    return 2 * (-low).clamp(min=torch.finfo(dtype).eps / 16)
