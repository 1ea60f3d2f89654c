"""Aggregator.forward on CPU when the checks are known on the host (max G_kk read finite, the
output bound holding): nothing is read or masked beyond that, and the policies behave as
before. Spies count the [K] row test and the [D] output pass; the numbers are compared with
the same call under check_finite="off" (no checks at all)."""

import pytest
import torch

from morl.aggregators import base, build


def _spy(monkeypatch, name):
    calls = []
    real = getattr(base, name)
    monkeypatch.setattr(base, name, lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("name", ["mgda", "upgrad", "imtl_g", "cr_mogm"])
@pytest.mark.parametrize("mode", ["raise", "skip"])
def test_finite_cpu_call_reads_no_flag_and_matches_off(name, mode, monkeypatch):
    rows, out = _spy(monkeypatch, "_finite_rows"), _spy(monkeypatch, "_all_finite")
    grads = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    checked, unchecked = build(name, check_finite=mode), build(name, check_finite="off")
    for _ in range(3):  # stateful methods (CR-MOGM) advance alike
        torch.testing.assert_close(checked(grads), unchecked(grads), rtol=0, atol=0)
    torch.testing.assert_close(checked.weights, unchecked.weights, rtol=0, atol=0)
    assert rows == [] and out == []
    if mode == "skip":  # the counter exists (0) after a call, as on the masked path
        assert checked.nonfinite_steps.dtype == torch.int64 and int(checked.nonfinite_steps) == 0


def test_skip_after_fast_calls_still_zeroes_and_keeps_state():
    """A non-finite call after finite ones (which took the unmasked path) is zeroed, counted
    and leaves CR-MOGM's running weights where the last finite call put them."""
    agg = build("cr_mogm", check_finite="skip")
    grads = torch.randn(3, 20, generator=torch.Generator().manual_seed(1))
    agg(grads)
    lam, calls = agg.lam.clone(), agg.calls.clone()
    bad = grads.clone()
    bad[1, 3] = float("nan")
    assert torch.equal(agg(bad), torch.zeros(20))
    assert int(agg.nonfinite_steps) == 1 and torch.equal(agg.lam, lam) and torch.equal(agg.calls, calls)
