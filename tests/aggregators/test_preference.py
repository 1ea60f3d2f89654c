"""The preference option (``morl.aggregators._preference``) through the methods that take it:
ConFIG, UPGrad and Aligned-MTL (``pref_vector``: K finite numbers >= 0, not all 0) and EPO-AL
(``preference``: > 0 each). ConFIG on orthonormal rows (G = I) has the hand weights
w·Σw/‖w‖² (ConFIG, arXiv 2408.11104, eq. 2: β = w, d = (1ᵀβ)/(βᵀβ) Jᵀβ)."""

import re

import pytest
import torch

from morl.aggregators import build


def config_on_identity(pref: list[float]) -> torch.Tensor:
    """ConFIG's weights for G = I by hand: w·Σw/‖w‖²."""
    w = torch.tensor(pref, dtype=torch.float64)
    return w * w.sum() / w.square().sum()


def test_a_zero_entry_and_entries_below_one_are_allowed():
    """Non-strict: (0, 0.5) is a valid preference (the weight on objective 1 is 0: d = g₂)."""
    agg = build("config", pref_vector=[0.0, 0.5])
    d = agg(torch.eye(2, dtype=torch.float64))
    assert torch.equal(agg.pref_vector, torch.tensor([0.0, 0.5], dtype=torch.float64))
    torch.testing.assert_close(agg.weights, config_on_identity([0.0, 0.5]), rtol=0, atol=1e-15)
    torch.testing.assert_close(d, torch.tensor([0.0, 1.0], dtype=torch.float64), rtol=0, atol=1e-15)


def test_the_device_copy_follows_the_dtype():
    """The copy of the preference is kept per (device, dtype): a float64 call after a float32 one
    uses the float64 values (0.1 and 0.7 are not float32 numbers, whose copy misses by 1e-8)."""
    pref = [0.1, 0.7]
    agg = build("config", pref_vector=pref)
    agg(torch.eye(2, dtype=torch.float32))
    agg(torch.eye(2, dtype=torch.float64))
    assert agg.weights.dtype == torch.float64
    torch.testing.assert_close(agg.weights, config_on_identity(pref), rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", ["upgrad", "aligned_mtl", "epo_al"])
def test_the_default_preference_is_made_on_the_input_device(name):
    """The default 1/K is created where the grads are: on ``meta`` the call runs and stays there
    (a CPU default would meet meta tensors and raise)."""
    grads, losses = torch.empty(3, 5, device="meta"), torch.empty(3, device="meta")
    d = build(name, check_finite="skip")(grads, losses)
    assert d.device.type == "meta" and d.shape == (5,)


@pytest.mark.parametrize(
    "name, key, value, allowed",
    [
        ("config", "pref_vector", [0.0, 0.0], ">= 0, not all 0"),
        ("upgrad", "pref_vector", [1.0, -1.0], ">= 0, not all 0"),
        ("epo_al", "preference", [0.5, 0.0], "> 0 each"),
    ],
)
def test_a_bad_preference_names_what_is_allowed(name, key, value, allowed):
    owner = type(build(name)).__name__
    line = f"{owner} option {key}={value!r} is not valid; allowed: None or K >= 1 finite numbers {allowed}"
    with pytest.raises(ValueError, match=f"^{re.escape(line)}$"):
        build(name, **{key: value})


def test_set_preference_replaces_the_device_copy_and_keeps_the_check():
    """After a call has copied the preference, ``set_preference`` makes the next call use the new
    one (ConFIG on G = I: the hand weights); EPO-AL still refuses a zero entry."""
    agg = build("config", pref_vector=[0.1, 0.7])
    agg(torch.eye(2, dtype=torch.float64))
    agg.set_preference([0.6, 0.2])
    agg(torch.eye(2, dtype=torch.float64))
    torch.testing.assert_close(agg.weights, config_on_identity([0.6, 0.2]), rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="> 0 each"):
        build("epo_al").set_preference([0.5, 0.0])
