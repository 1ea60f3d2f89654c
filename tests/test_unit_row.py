"""A direction whose weights are a unit vector (Krum's selection; MGDA and others at a vertex) is
a copy of that row on the CPU (``morl.aggregators.base._unit_row``), not w @ J over all K rows.

Reference: the row itself and w @ J in float64 on the weights the aggregator reports; with
weights exactly 1 and 0 both are exact, so every comparison here is exact (``torch.equal``).
A wrong row, a view instead of a copy or a lost gradient fails them."""

import pytest
import torch

from morl.aggregators import base, build
from morl.aggregators.base import LERP_MIN_D


@pytest.fixture
def vector_products(monkeypatch):
    """Counts ``w @ J`` with a 1-D left operand (the direction's product; the Gramian's is 2-D)."""
    calls = []
    real = torch.Tensor.__matmul__

    def spy(a, b):
        if a.dim() == 1:
            calls.append(1)
        return real(a, b)

    monkeypatch.setattr(torch.Tensor, "__matmul__", spy)
    return calls


def _krum_rows(seed: int, k: int = 10, d: int = 1000) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(k, d, generator=gen) * torch.rand(k, 1, generator=gen).add(0.5)


@pytest.mark.parametrize("seed", range(5))
def test_krum_returns_its_row_as_a_copy(seed, vector_products):
    grads = _krum_rows(seed)
    agg = build("krum", n_byzantine=1)
    out = agg(grads)
    w = agg.weights
    k = int(w.argmax())
    assert vector_products == [] and sorted(w.tolist()) == [0.0] * 9 + [1.0]
    assert torch.equal(out, grads[k]) and torch.equal(out.double(), w.double() @ grads.double())
    assert out.data_ptr() != grads[k].data_ptr()
    out.zero_()  # the caller owns the direction: the input is untouched
    assert torch.equal(grads, _krum_rows(seed))


def test_krum_with_many_rows_and_columns():
    """K = 50, D = 3e4 (the torch path of Krum's weights, beyond the Python one)."""
    grads = _krum_rows(7, k=50, d=30_000)
    agg = build("krum", n_byzantine=5)
    out = agg(grads)
    assert torch.equal(out, grads[int(agg.weights.argmax())])


@pytest.mark.parametrize("d", [1000, LERP_MIN_D + 5])
def test_mgda_at_a_vertex_returns_the_row(d, vector_products, monkeypatch):
    """g₁ = 2g₀: the min-norm point is g₀ itself (w = (1, 0)); from LERP_MIN_D columns the copy
    is taken before lerp (it reads one row, lerp two)."""
    lerps = []
    real = torch.lerp
    monkeypatch.setattr(torch, "lerp", lambda *a, **kw: lerps.append(1) or real(*a, **kw))
    g0 = torch.randn(d, generator=torch.Generator().manual_seed(d))
    agg = build("mgda")
    out = agg(torch.stack([g0, 2 * g0]))
    assert agg.weights.tolist() == [1.0, 0.0] and torch.equal(out, g0)
    assert vector_products == [] and lerps == []


def test_the_rows_gradient_flows_through_the_copy(vector_products):
    """Rows that need gradients, constant weights (Krum's): the gradient of Σd is 1 on the
    selected row and 0 elsewhere, as through w @ J."""
    grads = _krum_rows(3).requires_grad_(True)
    agg = build("krum", n_byzantine=1)
    agg(grads).sum().backward()
    assert vector_products == [] and not agg.weights.requires_grad
    assert torch.equal(grads.grad, agg.weights.unsqueeze(1).expand_as(grads))


def test_weights_that_need_a_gradient_keep_w_at_j(vector_products):
    """MGDA at a vertex on rows that need gradients: its weights do too, and a copy would cut
    their gradient."""
    g0 = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    grads = torch.stack([g0, 2 * g0]).requires_grad_(True)
    agg = build("mgda")
    out = agg(grads)
    assert agg.weights.requires_grad and vector_products == [1]
    assert torch.equal(out.detach(), g0)


def test_check_finite_off_reads_no_weights(vector_products):
    """With no output check nothing reads the weights (K = 10: no lerp either): w @ J, the same
    direction."""
    grads = _krum_rows(1)
    out = build("krum", n_byzantine=1, check_finite="off")(grads)
    assert vector_products == [1]
    assert torch.equal(out, build("krum", n_byzantine=1)(grads))


@pytest.mark.parametrize(
    "values, row",
    [
        ([0.0, 1.0, 0.0], 1),
        ([1.0, -0.0], 0),  # −0 is a zero weight
        ([1.0], 0),
        ([1.0, 0.5], None),  # another nonzero weight
        ([1.0, 1.0, 0.0], None),
        ([0.5, 0.0], None),  # one nonzero weight, not 1: w @ J (a scaled row)
        ([0.0, 0.0], None),
        ([1.0, float("nan")], None),
        ([1.0, 0.0, float("nan")], None),
    ],
)
def test_which_weights_are_a_unit_vector(values, row):
    grads = torch.arange(len(values) * 3, dtype=torch.float32).view(len(values), 3)
    out = base._unit_row(values, grads)
    assert (out is None) if row is None else torch.equal(out, grads[row])
