"""The seeded generators of the drawing aggregators (``morl.aggregators._seeded``: RLW, PCGrad,
GradDrop): CPU draws come from ``generator`` = ``torch.Generator().manual_seed(seed)``, the
extra state saves it (plus one generator per accelerator, none on the CPU), ``reset`` reseeds,
and on ``meta`` nothing is drawn from a generator. The per-accelerator generators need a GPU."""

import pytest
import torch

from morl.aggregators import build

J = torch.eye(4, dtype=torch.float64)


def test_cpu_draws_come_from_the_saved_generator():
    """RLW's normal draw is softmax(z), z ~ N(0, I) from ``torch.Generator().manual_seed(seed)``;
    that generator is ``agg.generator`` and the extra state, which holds no device generator."""
    agg, gen = build("rlw", seed=3), torch.Generator().manual_seed(3)
    for _ in range(2):
        agg(J)
        assert torch.equal(agg.weights, torch.softmax(torch.randn(4, generator=gen, dtype=torch.float64), dim=0))
    assert torch.equal(agg.generator.get_state(), gen.get_state())
    state = agg.state_dict()["_extra_state"]
    assert set(state) == {"generator", "device_generators"} and state["device_generators"] == {}
    assert torch.equal(state["generator"], gen.get_state())


@pytest.mark.parametrize("name", ["rlw", "pcgrad", "graddrop"])
def test_reset_and_load_leave_a_state_that_saves(name):
    """After ``reset`` the state is a fresh instance's; after a load it is the loaded one."""
    agg, fresh = build(name, seed=5), build(name, seed=5)
    agg(J)
    saved = agg.state_dict()
    agg.reset()
    assert torch.equal(agg.state_dict()["_extra_state"]["generator"], fresh.state_dict()["_extra_state"]["generator"])
    agg.load_state_dict(saved)
    assert torch.equal(agg.state_dict()["_extra_state"]["generator"], saved["_extra_state"]["generator"])


def test_an_extra_state_with_the_cpu_generator_only_loads():
    """``device_generators`` may be absent (a state with the CPU generator only): the load restores it."""
    a, b = build("rlw", seed=3), build("rlw", seed=7)
    a(J)
    b.set_extra_state({"generator": a.generator.get_state()})
    assert torch.equal(a(J), b(J))


@pytest.mark.parametrize("name", ["rlw", "pcgrad", "graddrop"])
def test_on_meta_the_draws_run_without_a_generator(name):
    """``meta`` has no generator (``torch.Generator(device="meta")`` raises): the call runs and stays on meta."""
    d = build(name, check_finite="skip")(torch.empty(3, 5, device="meta"), torch.empty(3, device="meta"))
    assert d.device.type == "meta" and d.shape == (5,)
