"""``WarmStartSolver`` (morl/aggregators/_warm_start.py), through MGDA: a warm start begins at the
previous solution of the same K, is dropped when K changes, starts at 1/K after a skipped first
call, and its options are checked. References: a fresh MGDA's cold solve and hand values."""

import pytest
import torch

from morl.aggregators import build
from morl.solvers.min_norm import min_norm_solve


def test_a_warm_start_is_dropped_when_k_changes():
    """MGDA warm-started at K = 8, then called with 7 rows: a cold solve, the same as a new MGDA's."""
    gen = torch.Generator().manual_seed(1)
    j8 = torch.randn(8, 20, generator=gen, dtype=torch.float64)
    agg = build("mgda", warm_start=True)
    agg(j8)
    torch.testing.assert_close(agg(j8[:7]), build("mgda")(j8[:7]), rtol=0, atol=1e-12)


def test_a_warm_start_begins_at_the_previous_solution():
    """Orthogonal rows of norms 1, 1, 10: λ ∝ 1/‖g_k‖² = (1, 1, 0.01)/2.01. One Wolfe round on a
    second Jacobian from there is the solver's round from that λ, not the cold start's."""
    ja = torch.diag(torch.tensor([1.0, 1.0, 10.0], dtype=torch.float64))
    jb = torch.randn(3, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    warm, cold = build("mgda", warm_start=True, max_iter=1), build("mgda", max_iter=1)
    warm(ja)
    lam_a = torch.tensor([1.0, 1.0, 0.01], dtype=torch.float64) / 2.01
    torch.testing.assert_close(warm.weights, lam_a, rtol=0, atol=1e-12)
    warm(jb), cold(jb)
    from_a = min_norm_solve(jb @ jb.T, max_iter=1, init=lam_a, eps_2=0.0)[0]
    torch.testing.assert_close(warm.weights, from_a, rtol=0, atol=1e-12)
    assert (warm.weights - cold.weights).abs().max() > 1e-3


def test_only_a_warm_start_remembers_the_solution():
    j = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    warm, cold = build("mgda", warm_start=True), build("mgda")
    warm(j)
    cold(j)
    torch.testing.assert_close(warm.w_prev, warm.weights, rtol=0, atol=0)
    assert cold.w_prev is None


def test_a_skipped_first_call_leaves_the_uniform_warm_start():
    """The state a skipped first call puts back is λ = 1/K (not zeros)."""
    bad = torch.ones(4, 5, dtype=torch.float64)
    bad[2, 1] = float("nan")
    agg = build("mgda", warm_start=True, check_finite="skip")
    agg(bad)
    assert torch.equal(agg.w_prev, torch.full((4,), 0.25, dtype=torch.float64))


@pytest.mark.parametrize("option", [{"max_iter": 0}, {"max_iter": 2.5}, {"warm_start": "yes"}])
def test_solver_options_are_checked(option):
    with pytest.raises(ValueError, match=f"MGDA option {next(iter(option))}="):
        build("mgda", **option)
