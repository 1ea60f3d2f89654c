"""The double-sampling contract of MoDo and SDMGrad (``morl/aggregators/_double_sampling.py``):
[J₁; J₂] must have an even number of rows, K is fixed by the state until ``reset()``, CR-MOGM
refuses a two-sample base, and a skipped first call leaves the uniform start. The weights on
J₁J₂ᵀ and d on ½(J₁ + J₂) are checked against each paper's algorithm in test_modo.py and
test_sdmgrad.py."""

import pytest
import torch

from morl.aggregators import build

METHODS = [("modo", "lam"), ("sdmgrad", "w")]


@pytest.mark.parametrize("name", [m for m, _ in METHODS])
def test_an_odd_number_of_rows_is_refused_and_k_is_fixed_until_reset(name):
    with pytest.raises(ValueError, match="double_sampling=True needs grads \\[2K, D\\]"):
        build(name, double_sampling=True)(torch.ones(5, 3))
    agg = build(name)
    agg(torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="reset"):
        agg(torch.eye(4, dtype=torch.float64))
    agg.reset()
    assert agg(torch.eye(4, dtype=torch.float64)).shape == (4,)


@pytest.mark.parametrize("name", [m for m, _ in METHODS])
def test_two_identical_samples_give_the_one_sample_direction(name):
    """J₁ = J₂ = J: J₁J₂ᵀ = JJᵀ and ½(J₁ + J₂) = J, so both modes take the same steps."""
    gen = torch.Generator().manual_seed(3)
    one, two = build(name), build(name, double_sampling=True)
    for _ in range(3):
        j = torch.randn(4, 9, generator=gen, dtype=torch.float64)
        torch.testing.assert_close(two(torch.cat([j, j])), one(j), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name", [m for m, _ in METHODS])
def test_a_two_sample_base_is_refused_by_cr_mogm(name):
    """CR-MOGM averages ``weights`` and applies them to grads: with two stacked samples the
    direction is not weights @ grads ([K] weights, [2K, D] rows), so the base is refused."""
    with pytest.raises(ValueError, match="weights @ grads"):
        build("cr_mogm", base=name, base_options={"double_sampling": True})
    build("cr_mogm", base=name)  # one sample: d = weights @ grads


@pytest.mark.parametrize("name, state", METHODS)
def test_a_skipped_first_call_leaves_the_starting_weights(name, state):
    """Under ``check_finite="skip"`` a non-finite FIRST call is zeroed and puts the state back
    to where a fresh aggregator starts: the uniform 1/K (each method's initial λ, Alg. 1 of
    either paper), not zeros, so the next finite calls equal a fresh aggregator's."""
    gen = torch.Generator().manual_seed(5)
    js = [torch.randn(4, 9, generator=gen, dtype=torch.float64) for _ in range(3)]
    bad = js[0].clone()
    bad[2, 3] = float("nan")
    skipping, fresh = build(name, check_finite="skip"), build(name)
    assert torch.equal(skipping(bad), torch.zeros(9, dtype=torch.float64))
    torch.testing.assert_close(getattr(skipping, state), torch.full((4,), 0.25, dtype=torch.float64), rtol=0, atol=0)
    for j in js:
        torch.testing.assert_close(skipping(j), fresh(j), rtol=0, atol=0)
