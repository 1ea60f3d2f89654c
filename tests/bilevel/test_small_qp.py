"""The small QP solver behind FORUM's λ subproblem against known solutions."""

from __future__ import annotations

import torch

from morl.bilevel import forum_direction, solve_qp


def _qp11_value(upper, gq, rho, lam):
    """Eq. (10): ½‖Σλ∇F + ν(λ)∇q̃‖² − ν(λ)φ with ν(λ) = max(λ·π, 0), π_i = ρ − ⟨∇q̃, ∇F_i⟩/‖∇q̃‖²."""
    pi = rho - upper @ gq / (gq @ gq)
    nu = (lam @ pi).clamp_min(0)
    return 0.5 * (lam @ upper + nu[..., None] * gq).pow(2).sum(-1) - nu * 0.5 * rho * (gq @ gq)


def test_closed_form_and_interior_point_agree_on_degenerate_inputs():
    e = torch.eye(3, dtype=torch.float64)
    cases = [
        (torch.stack([e[0], e[0]]), e[1]),  # identical upper gradients
        (torch.stack([e[0], -e[0]]), e[0]),  # opposite; ∇q̃ colinear with one of them
        (torch.stack([e[0], 2 * e[1]]), 1e-9 * e[2]),  # tiny constraint gradient
        (torch.stack([1e8 * e[0], 1e-8 * e[1]]), e[0] + e[1]),  # extreme scales
    ]
    for upper, gq in cases:
        a, b = forum_direction(upper, gq, 0.5), forum_direction(upper, gq, 0.5, qp="ipm")
        va, vb = float(_qp11_value(upper, gq, 0.5, a.lam)), float(_qp11_value(upper, gq, 0.5, b.lam))
        assert torch.isfinite(a.descent).all() and torch.isfinite(b.descent).all()
        scale = max(upper.pow(2).sum(1).max().item(), gq.pow(2).sum().item())  # the QP's units
        assert abs(va - vb) <= 1e-9 * scale and va <= vb + 1e-12 * scale


def test_small_qp_against_known_solution():
    # min ½‖x‖² − x·(1, 2) s.t. x1 + x2 = 1, x ≥ 0  ->  x = (0, 1).
    eye = torch.eye(2, dtype=torch.float64)
    x, _ = solve_qp(eye, -torch.tensor([1.0, 2.0]), torch.ones(1, 2), torch.ones(1), -eye, torch.zeros(2))
    # A degenerate vertex (x1 = 0 with a zero multiplier): interior points approach it like √μ.
    assert torch.allclose(x, torch.tensor([0.0, 1.0], dtype=torch.float64), atol=1e-5)
