"""The orders that ignore gradients (morl/ordering/baselines.py): random reshuffling, FlipFlop and
Random FlipFlop, epoch by epoch against their definitions; shared or per-objective orders."""

import pytest
import torch

from morl.ordering import FlipFlop, RandomFlipFlop, RandomReshuffle


def _epochs(ordering, n):
    """The orders of epochs 0..n-1 ([M, K] each)."""
    seen = []
    for _ in range(n):
        seen.append(ordering.orders())
        for _ in ordering.iter_units():
            pass
    return seen


def test_flipflop_reverses_the_previous_order():
    e = _epochs(FlipFlop(12, 2, shuffle_units=False, shared=False, seed=1), 4)
    for before, after in zip(e, e[1:]):
        assert torch.equal(after, before.flip(1))
    assert not torch.equal(e[0][0], e[0][1])  # shared=False: an order per objective


def test_random_flipflop_reverses_on_odd_epochs_and_draws_on_even_ones():
    e = _epochs(RandomFlipFlop(20, 1, shuffle_units=False, seed=2), 5)
    assert torch.equal(e[1], e[0].flip(1)) and torch.equal(e[3], e[2].flip(1))
    assert not torch.equal(e[2], e[1].flip(1)) and not torch.equal(e[4], e[3].flip(1))


@pytest.mark.parametrize("shared", [True, False])
def test_random_reshuffle_draws_a_new_order_every_epoch(shared):
    e = _epochs(RandomReshuffle(20, 3, shuffle_units=False, shared=shared, seed=3), 3)
    assert not torch.equal(e[1], e[0]) and not torch.equal(e[2], e[1])
    assert all(torch.equal(o[0], o[1]) == shared for o in e)
