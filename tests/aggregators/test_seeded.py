"""The seeded generators of the drawing aggregators (``morl.aggregators._seeded``: RLW, PCGrad,
GradDrop): each device draws from ``torch.Generator(device).manual_seed(seed)``, made on its first
draw; the extra state saves every device's generator, ``reset`` starts them all at the seed again,
and on ``meta`` nothing is drawn from a generator."""

import pytest
import torch

from morl.aggregators import build

J = torch.eye(4, dtype=torch.float64)


def test_draws_come_from_the_devices_generator_seeded_once_and_saved():
    """RLW's normal draw is softmax(z), z ~ N(0, I) from ``torch.Generator().manual_seed(seed)``,
    one stream over calls, saved under the device's name."""
    agg, gen = build("rlw", seed=3), torch.Generator().manual_seed(3)
    assert agg.state_dict()["_extra_state"] == {"generators": {}}
    for _ in range(2):
        agg(J)
        assert torch.equal(agg.weights, torch.softmax(torch.randn(4, generator=gen, dtype=torch.float64), dim=0))
    state = agg.state_dict()["_extra_state"]
    assert list(state["generators"]) == ["cpu"]
    assert torch.equal(state["generators"]["cpu"], gen.get_state())


@pytest.mark.parametrize("name", ["rlw", "pcgrad", "graddrop"])
def test_reset_draws_as_a_fresh_instance_and_a_load_as_the_saved_one(name):
    agg, fresh, other = build(name, seed=5), build(name, seed=5), build(name, seed=9)
    g = torch.randn(3, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    agg(g)
    saved = agg.state_dict()
    after_save = agg(g)
    agg.reset()
    assert torch.equal(agg(g), fresh(g))
    other.load_state_dict(saved)
    assert torch.equal(other(g), after_save)


def test_a_state_in_the_earlier_layout_loads():
    """``{"generator": cpu state, "device_generators": {...}}`` (without the second key too)."""
    a, b, c = build("rlw", seed=3), build("rlw", seed=7), build("rlw", seed=7)
    a(J)
    cpu = a.state_dict()["_extra_state"]["generators"]["cpu"]
    b.set_extra_state({"generator": cpu, "device_generators": {}})
    c.set_extra_state({"generator": cpu})
    expected = a(J)
    assert torch.equal(b(J), expected) and torch.equal(c(J), expected)


@pytest.mark.parametrize("name", ["rlw", "pcgrad", "graddrop"])
def test_on_meta_the_draws_run_without_a_generator(name):
    """``meta`` has no generator (``torch.Generator(device="meta")`` raises): the call runs and stays on meta."""
    d = build(name, check_finite="skip")(torch.empty(3, 5, device="meta"), torch.empty(3, device="meta"))
    assert d.device.type == "meta" and d.shape == (5,)
