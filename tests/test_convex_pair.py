"""Two-row directions whose weights sum to 1 (MGDA, IMTL-G and CR-MOGM by construction) are
formed on the CPU as ``torch.lerp(g₀, g₁, w₁)`` from LERP_MIN_D columns
(``morl.aggregators.base``): the same direction as w @ J within the rounding of the weights and
of the sums, and w @ J itself wherever that does not apply.

Reference: w @ J in float64 on the weights the aggregator reports. Bound, elementwise:
8ε(|w₀||g₀| + |w₁||g₁| + |g₀| + |g₁|) (lerp's three roundings, at most 3ε of the first terms
plus ε of the rows, and w₀ taken as 1 − w₁, 2ε of |g₀|); measured ≤ 0.10 of it over seeds
0..9, the three methods and both dtypes.
A swapped row, a dropped weight or the wrong sign costs O(|g|)."""

import pytest
import torch

from morl.aggregators import base, build
from morl.aggregators.base import LERP_MIN_D

D = LERP_MIN_D + 5


@pytest.fixture
def lerps(monkeypatch):
    calls = []
    real = torch.lerp
    monkeypatch.setattr(torch, "lerp", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    return calls


def _rows(seed: int, dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    grads = torch.randn(2, D, generator=gen, dtype=torch.float64)
    grads[1] = 3.0 * grads[1] - 0.5 * grads[0]  # different norms, some conflict
    return grads.to(dtype)


def _assert_is_w_at_j(out: torch.Tensor, w: torch.Tensor, grads: torch.Tensor) -> None:
    eps = torch.finfo(grads.dtype).eps
    g, w = grads.double(), w.double()
    bound = 8 * eps * (w.abs() @ g.abs() + g.abs().sum(0))
    assert bool(((out.double() - w @ g).abs() <= bound).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["mgda", "imtl_g", "cr_mogm"])
def test_weights_that_sum_to_one_take_lerp_and_give_w_at_j(name, dtype, lerps):
    for seed in range(3):
        grads = _rows(seed, dtype)
        agg = build(name)
        lerps.clear()
        out = agg(grads)
        assert lerps == [1] and out.dtype == dtype and out.shape == (D,)
        assert abs(float(agg.weights.double().sum()) - 1.0) <= 2 * torch.finfo(dtype).eps
        _assert_is_w_at_j(out, agg.weights, grads)


def test_lerp_is_exact_for_the_rows_and_the_midpoint(lerps):
    """w = (1, 0), (0, 1) and (½, ½) through the method that forms them (IMTL-G on equal-norm
    rows gives ½, ½; MGDA on a row dominated by the other gives a vertex)."""
    gen = torch.Generator().manual_seed(0)
    g0 = torch.randn(D, generator=gen)
    g1 = torch.randn(D, generator=gen)
    g1 = g1 * (g0.norm() / g1.norm())  # equal norms
    out = build("imtl_g")(torch.stack([g0, g1]))
    assert lerps == [1]
    torch.testing.assert_close(out, 0.5 * (g0 + g1), rtol=1e-6, atol=1e-6)
    agg = build("mgda")  # g0 and 2·g0: the min-norm point is g0 itself, the vertex w = (1, 0)
    out = agg(torch.stack([g0, 2 * g0]))
    assert agg.weights.tolist() == [1.0, 0.0] and torch.equal(out, g0)


def test_a_pareto_stationary_pair_gives_zero_within_rounding(lerps):
    """g₁ = −3g₀ in float32: MGDA's w = (3/4, 1/4) up to the Gramian's rounding, d ≈ 0. Over
    seeds 0..9, ‖d‖/‖g₀‖ ≤ 2.0e-6 (the weights' error from G's float32 sums), the same as
    w @ J on the reported weights to 3 %; bounds 1e-5 and 1.1× w @ J + 8ε‖g₀‖."""
    eps = torch.finfo(torch.float32).eps
    for seed in range(3):
        g0 = torch.randn(D, generator=torch.Generator().manual_seed(seed))
        grads = torch.stack([g0, -3 * g0])
        agg = build("mgda")
        lerps.clear()
        out = agg(grads)
        assert lerps == [1]
        norm, gemv = float(out.double().norm()), float((agg.weights.double() @ grads.double()).norm())
        assert norm <= 1e-5 * float(g0.norm())
        assert norm <= 1.1 * gemv + 8 * eps * float(g0.norm())


def test_lerp_from_exactly_lerp_min_d_columns(lerps):
    out = build("mgda")(_rows(2, torch.float32)[:, :LERP_MIN_D])
    assert lerps == [1] and out.shape == (LERP_MIN_D,)


def test_the_weights_may_miss_one_by_two_rounding_units_and_no_more():
    """|w₀ + w₁ − 1| ≤ 2ε of the rows' dtype (here exactly 2ε and 2.5ε, in float32 values):
    lerp at the bound, w @ J (None) past it."""
    eps = torch.finfo(torch.float32).eps
    grads = torch.zeros(2, 4)
    assert base._convex_pair([0.5, 0.5 + 2 * eps], grads) is not None
    assert base._convex_pair([0.5, 0.5 + 2.5 * eps], grads) is None
    assert base._convex_pair([0.5, 0.5 - 2.5 * eps], grads) is None
    assert base._convex_pair([float("nan"), 0.5], grads) is None


def test_check_finite_off_takes_lerp_and_keeps_nothing_for_the_output_check(lerps):
    """With no output check the call still takes lerp (the same direction as under "raise")
    and keeps no reference to its direction and rows."""
    grads = _rows(3, torch.float32)
    agg = build("mgda", check_finite="off")
    out = agg(grads)
    assert lerps == [1] and "_out_bound" not in agg.__dict__
    assert torch.equal(out, build("mgda")(grads))


def test_rows_that_need_gradients_under_constant_weights_take_lerp(lerps):
    """Multi-Krum's weights (here both rows, ½ each) are a selection (no gradient): lerp, and
    the rows' gradient is w's."""
    grads = _rows(4, torch.float32).requires_grad_(True)
    agg = build("krum", m=2)
    out = agg(grads)
    assert lerps == [1] and not agg.weights.requires_grad
    out.sum().backward()
    torch.testing.assert_close(grads.grad, agg.weights.unsqueeze(1).expand(2, D), rtol=0, atol=0)


@pytest.mark.parametrize("case", ["sum_not_one", "three_rows", "too_few_columns", "autograd", "meta"])
def test_w_at_j_elsewhere(case, lerps):
    """Weights that do not sum to 1 (UPGrad), K = 3, one column fewer, weights that need a
    gradient (lerp's weight would be a float, cutting it) and another device (meta, for CUDA):
    w @ J."""
    name, grads = "mgda", _rows(0, torch.float32)
    if case == "sum_not_one":
        name = "upgrad"
    elif case == "three_rows":
        grads = torch.cat([grads, grads[:1] * 0.5])
    elif case == "too_few_columns":
        grads = grads[:, : LERP_MIN_D - 1]
    elif case == "autograd":
        grads = grads.clone().requires_grad_(True)
    elif case == "meta":
        grads = torch.empty(2, D, device="meta")
    agg = build(name, check_finite="off" if case == "meta" else "raise")
    out = agg(grads)
    assert lerps == []
    if case == "meta":
        assert out.shape == (D,) and out.device.type == "meta"
        return
    _assert_is_w_at_j(out.detach(), agg.weights.detach(), grads.detach())
    if case == "autograd":  # the gradient reaches the rows through w and through J
        assert agg.weights.requires_grad
        out.sum().backward()
        assert grads.grad is not None and bool(torch.isfinite(grads.grad).all())


def test_the_output_bound_proves_a_lerp_direction_finite(monkeypatch):
    """The weights read for lerp's test also give the output bound: no [D] pass follows (a bound
    that fails falls back to that pass: tests/test_output_finite.py)."""
    calls = []
    real = base._all_finite
    monkeypatch.setattr(base, "_all_finite", lambda x: calls.append(1) or real(x))
    agg = build("mgda")
    agg(_rows(1, torch.float32))
    assert calls == []
