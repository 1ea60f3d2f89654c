"""The output finiteness check of Gramian aggregators: a K-sized bound ‖w‖₁·sqrt(max G_kk)
on CPU, with the exact pass over [D] whenever the bound does not hold."""

import pytest
import torch

from morl.aggregators import base
from morl.aggregators.base import GramianAggregator


class Fixed(GramianAggregator):
    def __init__(self, w, **kw):
        super().__init__(**kw)
        self._w = torch.tensor(w)

    def weights_from_gramian(self, gram):
        return self._w.to(gram)


def _counting(monkeypatch):
    calls = []
    real = base._all_finite

    def spy(x):
        calls.append(x.shape)
        return real(x)

    monkeypatch.setattr(base, "_all_finite", spy)
    return calls


@pytest.mark.parametrize("mode", ["raise", "skip"])
def test_bound_holds_no_pass_over_d(monkeypatch, mode):
    calls = _counting(monkeypatch)
    g = torch.randn(3, 1000)
    d = Fixed([0.2, 0.3, 0.5], check_finite=mode)(g)
    assert torch.equal(d, torch.tensor([0.2, 0.3, 0.5]) @ g)
    assert calls == []


@pytest.mark.parametrize("mode", ["raise", "skip"])
def test_huge_weights_bound_fails_finite_direction_kept(monkeypatch, mode):
    calls = _counting(monkeypatch)
    agg = Fixed([5e37, 5e37], check_finite=mode)
    d = agg(torch.ones(2, 5))
    assert torch.isfinite(d).all() and torch.allclose(d, torch.full((5,), 1e38))
    assert calls == [(5,)]  # the exact check decided
    if mode == "skip":
        assert int(agg.nonfinite_steps) == 0


@pytest.mark.parametrize("rows, w", [(2e38, [1.0, 1.0]), (1e18, [1e21, 1e21])])
def test_overflowing_direction_raises(rows, w):
    # 2e38 rows: G overflows (rescaled, no float scale: exact path); 1e18 rows: G = 5e36 is read,
    # the bound fails and the [D] pass sees the inf
    with pytest.raises(ValueError, match="non-finite direction"):
        Fixed(w)(torch.full((2, 5), rows))


@pytest.mark.parametrize("rows, w", [(2e38, [1.0, 1.0]), (1e18, [1e21, 1e21])])
def test_overflowing_direction_skipped(rows, w):
    agg = Fixed(w, check_finite="skip")
    d = agg(torch.full((2, 5), rows))
    assert torch.equal(d, torch.zeros(5)) and int(agg.nonfinite_steps) == 1


def test_off_keeps_no_reference():
    agg = Fixed([0.5, 0.5], check_finite="off")
    agg(torch.ones(2, 5))
    assert "_out_bound" not in agg.__dict__
