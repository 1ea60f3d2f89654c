"""``WarmStartSolver`` (morl/aggregators/_warm_start.py), through MGDA: only a warm start remembers
its solution, it is dropped when K changes, starts at 1/K after a skipped first call, and its
options are checked (that a solve begins there: test_mgda.py, test_cagrad.py). References: a
fresh MGDA's cold solve and hand values."""

import pytest
import torch

from morl.aggregators import build


def test_a_warm_start_is_dropped_when_k_changes():
    """MGDA warm-started at K = 8, then called with 7 rows: a cold solve, the same as a new MGDA's."""
    gen = torch.Generator().manual_seed(1)
    j8 = torch.randn(8, 20, generator=gen, dtype=torch.float64)
    agg = build("mgda", warm_start=True)
    agg(j8)
    torch.testing.assert_close(agg(j8[:7]), build("mgda")(j8[:7]), rtol=0, atol=1e-12)


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
