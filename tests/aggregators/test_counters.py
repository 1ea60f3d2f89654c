"""``CallCounters`` (morl/aggregators/_counters.py): the plain-int schedules of DWA, EPO-AL,
ExcessMTL, MoCo and Nash-MTL travel in ``state_dict`` (extra state) and ``reset()`` zeroes them.
References: DWA's counts by hand, and the calls a method makes without the save or the reset."""

import pytest
import torch

from morl.aggregators import build

COUNTED = {"dwa": {"every": 2}, "epo_al": {}, "excess_mtl": {}, "moco": {}, "nash_mtl": {"update_weights_every": 2}}


def _calls(seed: int, n: int, k: int = 3, d: int = 7):
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(k, d, generator=gen, dtype=torch.float64), torch.rand(k, generator=gen, dtype=torch.float64) + 0.5)
        for _ in range(n)
    ]


def test_dwa_counts_calls_within_a_period_and_whole_periods():
    agg = build("dwa", every=2)
    for grads, losses in _calls(0, 3):
        agg(grads, losses)
    assert agg.get_extra_state() == {"calls": 1, "periods": 1}
    agg.reset()
    assert agg.get_extra_state() == {"calls": 0, "periods": 0}


@pytest.mark.parametrize("name", sorted(COUNTED))
def test_a_loaded_state_continues_the_schedule(name):
    calls = _calls(1, 7)
    agg = build(name, **COUNTED[name])
    for grads, losses in calls[:3]:
        agg(grads, losses)
    saved = agg.state_dict()
    expected = [agg(grads, losses) for grads, losses in calls[3:]]
    fresh = build(name, **COUNTED[name])
    fresh.load_state_dict(saved)
    for (grads, losses), want in zip(calls[3:], expected):
        torch.testing.assert_close(fresh(grads, losses), want, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(COUNTED))
def test_reset_starts_the_schedule_over(name):
    calls = _calls(2, 4)
    agg, fresh = build(name, **COUNTED[name]), build(name, **COUNTED[name])
    for grads, losses in calls:
        agg(grads, losses)
    agg.reset()
    for grads, losses in calls:
        torch.testing.assert_close(agg(grads, losses), fresh(grads, losses), rtol=0, atol=0)
