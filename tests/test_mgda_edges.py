"""MGDA edges the mutation run of `morl/aggregators/mgda.py` (docs/testing.md) found unpinned.

K = 2 is the closed form λ₁ = clamp((g22 − g12)/(g11 + g22 − 2 g12), 0, 1), which the Gramian
contract says is solved in float64 whatever the Gramian's dtype ("G stays in the gradients'
dtype ... they solve in float64", GramianAggregator.aggregate), and returned in that dtype.
"""

import torch

import morl

# float32-exact entries whose float32 sum g11 + g22 = 2^25 + 2 rounds to 2^25 (spacing 4 there):
# the denominator is 6 exactly (λ₁ = 2/6 = 1/3) but 4 in float32 arithmetic (λ₁ = 1/2).
_G11, _G22, _G12 = 2.0**24 + 2, 2.0**24, 2.0**24 - 2
_GRAM32 = torch.tensor([[_G11, _G12], [_G12, _G22]], dtype=torch.float32)
_LAMBDA = torch.tensor([1.0 / 3.0, 2.0 / 3.0], dtype=torch.float64)  # hand value: (g22 − g12) = 2 over 6


def test_gram_entries_are_exact_in_float32_and_positive_definite():
    assert _GRAM32.to(torch.float64).tolist() == [[_G11, _G12], [_G12, _G22]]
    assert _G11 * _G22 - _G12**2 > 0


def test_two_task_closed_form_is_solved_in_float64_and_returned_in_the_gramian_dtype():
    w = morl.build("mgda").weights_from_gramian(_GRAM32)
    assert w.dtype == torch.float32
    # float32 arithmetic would give [0.5, 0.5]: a margin of 0.17 against a tolerance of 1e-6
    torch.testing.assert_close(w, _LAMBDA.to(torch.float32), rtol=0.0, atol=1e-6)


def test_two_task_weights_are_the_warm_start_state():
    mgda = morl.build("mgda", warm_start=True)
    w = mgda.weights_from_gramian(_GRAM32.to(torch.float64))
    torch.testing.assert_close(w, _LAMBDA, rtol=0.0, atol=1e-12)
    assert mgda.w_prev is not None
    torch.testing.assert_close(mgda.w_prev, _LAMBDA, rtol=0.0, atol=1e-12)


def test_documented_defaults():
    mgda = morl.build("mgda")
    assert (mgda.max_iter, mgda.tol, mgda.warm_start) == (100, 1e-8, False)
    mgda(torch.randn(3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    assert mgda.w_prev is None  # no warm start by default: no state kept


def test_options_reach_the_min_norm_solver(monkeypatch):
    """K > 2 goes through min_norm_solve with the user's max_iter and tol, and without the
    reference code's K = 2 guard (eps_2 = 0)."""
    import morl.aggregators.mgda as mgda_module

    seen = {}
    real = mgda_module.min_norm_solve

    def spy(gram, **kwargs):
        seen.update({k: v for k, v in kwargs.items() if k != "init"})
        return real(gram, **kwargs)

    monkeypatch.setattr(mgda_module, "min_norm_solve", spy)
    gen = torch.Generator().manual_seed(0)
    j = torch.randn(4, 9, generator=gen, dtype=torch.float64)
    morl.build("mgda", max_iter=37, tol=1e-5)(j)
    assert seen == {"max_iter": 37, "tol": 1e-5, "eps_2": 0.0}

