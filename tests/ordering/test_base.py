"""The ordering protocol (morl/ordering/base.py) for every ordering: each epoch is a permutation,
rebuilt from the signs as GraB's reorder; the greedy signs of Alg. 2 by hand and against random
signs; units and the DataLoader sampler; one clear error per misuse."""

import numpy as np
import pytest
import torch

from morl.ordering import (
    FlipFlop,
    GraBSeparate,
    GraBShared,
    JoGBa,
    RandomFlipFlop,
    RandomReshuffle,
    build,
    greedy_signs,
    make_units,
    reorder,
    signed_prefix_discrepancy,
)
from tests.ordering.static_gradients import gaussian_grads, make, run_static


@pytest.mark.parametrize("cls", [JoGBa, GraBSeparate, GraBShared, RandomReshuffle, FlipFlop, RandomFlipFlop])
def test_every_epoch_is_a_permutation_and_built_from_the_signs(cls):
    G = gaussian_grads(3, 40, 6, seed=2)
    o = make(cls, G, seed=0)
    for _ in range(5):
        before = o.orders()
        run_static(o, G, 1)
        after = o.orders()
        for m in range(3):
            assert sorted(after[m].tolist()) == list(range(40))
        if o.needs_gradients:
            signs = o.last_signs
            for m in range(3):
                plus = before[m][signs[m]].tolist()
                minus = before[m][~signs[m]].tolist()
                assert after[m].tolist() == plus + minus[::-1]


def test_greedy_signs_beat_random_signs():
    # Median ratio of signed-prefix discrepancy, greedy / random, over 20 draws (d <= K/2).
    gen = torch.Generator().manual_seed(12)
    ratios = []
    for _ in range(20):
        z = torch.randn(64, 4, generator=gen, dtype=torch.float64)
        z = z / z.norm(dim=1).max()
        s, signs = torch.zeros(4, dtype=torch.float64), []
        for zk in z:
            plus = greedy_signs(s, zk, "inf")
            s += zk if plus else -zk
            signs.append(bool(plus))
        rand = torch.rand(64, generator=gen) < 0.5
        ratios.append(float(signed_prefix_discrepancy(z, torch.tensor(signs)) / signed_prefix_discrepancy(z, rand)))
    assert float(np.median(ratios)) <= 0.65


def test_sampler_yields_objective_blocks_for_a_dataloader():
    data = torch.utils.data.TensorDataset(torch.arange(10.0)[:, None])
    o = build("random", 10, 2, batch_size=3, shared=False, seed=0)
    loader = torch.utils.data.DataLoader(data, batch_sampler=o)
    seen = 0
    for (x,) in loader:
        assert x.shape == (6, 1)
        seen += 1
    assert seen == len(o) == 4
    # every sample appears in some unit (the last unit wraps around)
    assert set(o.units.reshape(-1).tolist()) == set(range(10))
    assert o.epoch == 1


def test_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match="unknown ordering"):
        build("nope", 10, 2)
    with pytest.raises(ValueError, match="valid options"):
        build("jogba", 10, 2, centring="x")
    with pytest.raises(ValueError, match="centering"):
        JoGBa(10, 2, centering="bad")
    o = JoGBa(4, 2)
    with pytest.raises(ValueError, match="shape"):
        o.observe(0, torch.zeros(3, 5))
    with pytest.raises(ValueError, match="observed 1 of 4"):
        o.observe(0, torch.zeros(2, 5))
        o.end_epoch()
    with pytest.raises(ValueError, match="direction"):
        GraBShared(4, 2).observe(0, torch.zeros(2, 5))


def test_units_cover_every_sample_and_the_last_one_wraps_around():
    assert make_units(7, 3, None).tolist() == [[0, 1, 2], [3, 4, 5], [6, 0, 1]]
    shuffled = make_units(7, 3, torch.Generator().manual_seed(0))
    assert sorted(shuffled.reshape(-1)[:7].tolist()) == list(range(7))


def test_reorder_puts_the_plus_units_first_then_the_minus_units_reversed():
    arrival = torch.tensor([5, 3, 8, 1, 4])
    plus = torch.tensor([True, False, True, False, False])
    assert reorder(arrival, plus).tolist() == [5, 8, 4, 1, 3]


def test_greedy_signs_by_hand():
    """+1 iff ‖s + g‖ <= ‖s − g‖: s = (1, 0), g = (1, 0.5) adds to s (−1 in both norms);
    g = (−1, 2) gives a tie in ∞-norm (2 against 2) and s·g < 0 in l2 (+1 in both)."""
    s = torch.tensor([1.0, 0.0])
    for norm in ("inf", "l2"):
        assert not bool(greedy_signs(s, torch.tensor([1.0, 0.5]), norm))
        assert bool(greedy_signs(s, torch.tensor([-1.0, 2.0]), norm))
    batched = greedy_signs(s.repeat(2, 1), torch.tensor([[1.0, 0.5], [-1.0, 2.0]]), "inf")
    assert batched.tolist() == [False, True]
