"""The small QP solver behind FORUM's λ subproblem against known solutions."""

from __future__ import annotations

import torch

from morl.bilevel import solve_qp


def test_small_qp_against_known_solution():
    # min ½‖x‖² − x·(1, 2) s.t. x1 + x2 = 1, x ≥ 0  ->  x = (0, 1).
    eye = torch.eye(2, dtype=torch.float64)
    x, _ = solve_qp(eye, -torch.tensor([1.0, 2.0]), torch.ones(1, 2), torch.ones(1), -eye, torch.zeros(2))
    # A degenerate vertex (x1 = 0 with a zero multiplier): interior points approach it like √μ.
    assert torch.allclose(x, torch.tensor([0.0, 1.0], dtype=torch.float64), atol=1e-5)
