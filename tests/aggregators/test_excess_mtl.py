"""ExcessMTL (He et al., ICML 2024, arXiv 2402.02009) against a hand computation of its
equations, against TorchJD's ExcessMTL (a test-only reference written by others), and its
state: the baseline, warm-up, a shape change, reset and the skip policy."""

import math

import pytest
import torch

from morl.aggregators import build


def _hand(calls: list[list[list[float]]], eta: float, warmup: int) -> list[list[float]]:
    """α after each call, in Python floats from the equations (module docstring): S += g²,
    Ê_k = Σ g² / sqrt(S + 1e-7), baseline = first Ê (or the warm-up mean), α ∝ α exp(η rate)."""
    k = len(calls[0])
    s = [[0.0] * len(calls[0][0]) for _ in range(k)]
    alpha, base, total, out = [1.0 / k] * k, None, [0.0] * k, []
    for n, rows in enumerate(calls):
        s = [[a + x * x for a, x in zip(srow, row)] for srow, row in zip(s, rows)]
        excess = [sum(x * x / math.sqrt(a + 1e-7) for x, a in zip(row, srow)) for row, srow in zip(rows, s)]
        if n < warmup:
            total = [t + e for t, e in zip(total, excess)]
        else:
            if base is None:
                base = [t / warmup for t in total] if warmup else excess
                rate = [e / (b + 1e-7) for e, b in zip(excess, base)] if warmup else excess
            else:
                rate = [e / (b + 1e-7) for e, b in zip(excess, base)]
            logits = [math.log(a) + eta * r for a, r in zip(alpha, rate)]
            top = max(logits)
            exps = [math.exp(x - top) for x in logits]
            alpha = [x / sum(exps) for x in exps]
        out.append(alpha)
    return out


def _calls(seed: int, k: int, d: int, n: int, scale: float = 0.05) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    norms = torch.logspace(0, 1, k, dtype=torch.float64).unsqueeze(1)
    return [scale * norms * torch.randn(k, d, generator=gen, dtype=torch.float64) for _ in range(n)]


@pytest.mark.parametrize("warmup", [0, 2])
@pytest.mark.parametrize("eta", [1.0, 0.3])
def test_weights_follow_the_equations(warmup, eta):
    """Six calls at K = 3, D = 5 (rows 1-10 apart): α to 1e-12 of the hand computation, on the
    simplex, uniform during warm-up, and d = Σ α_k g_k."""
    calls = _calls(0, 3, 5, 6)
    agg = build("excess_mtl", robust_step_size=eta, warmup=warmup)
    expected = _hand([c.tolist() for c in calls], eta, warmup)
    for n, (grads, alpha) in enumerate(zip(calls, expected)):
        d = agg(grads)
        assert agg.weights.tolist() == pytest.approx(alpha, rel=1e-12, abs=1e-15), n
        assert float(agg.weights.sum()) == pytest.approx(1.0, abs=1e-14)
        if n < warmup:
            assert agg.weights.tolist() == pytest.approx([1 / 3] * 3, abs=1e-15)
        torch.testing.assert_close(d, agg.weights @ grads, rtol=1e-14, atol=0)
    assert expected[-1] != pytest.approx([1 / 3] * 3, abs=1e-3)  # the weights did move


@pytest.mark.parametrize("warmup", [0, 3])
def test_matches_torchjd(warmup):
    """TorchJD 0.18's ExcessMTL (its weights start at 1/m and sum to 1, as here) over 8 calls
    of K = 2, 5 in float32 and float64: directions to 4e-6 / 1e-12 relative (measured over
    seeds 0..9: 3.8e-7 and 9.9e-16; float32's bound leaves room for other CPUs' kernels, whose
    rsqrt and sums round differently, while any formula error is off by 1e-2 or more)."""
    tj = pytest.importorskip("torchjd.aggregation")
    for k in (2, 5):
        for dtype, tol in ((torch.float32, 4e-6), (torch.float64, 1e-12)):
            ours, theirs = build("excess_mtl", warmup=warmup), tj.ExcessMTL(n_warmup_steps=warmup)
            for grads in _calls(k, k, 40, 8):
                grads = grads.to(dtype)
                a, b = ours(grads), theirs(grads)
                assert float((a - b).abs().max()) <= tol * float(b.abs().max()), (k, dtype)


def test_the_task_with_the_larger_excess_risk_gains_weight():
    """Two tasks, one with 4x the gradient: its excess risk is larger, so its weight rises above
    1/2 at the first step (Eq. 9 moves towards the larger Ê)."""
    g = torch.tensor([[0.01, 0.02, -0.01], [0.04, 0.08, -0.04]], dtype=torch.float64)
    agg = build("excess_mtl")
    agg(g)
    assert float(agg.weights[1]) > 0.5 > float(agg.weights[0])


def test_a_shape_change_raises_and_reset_starts_over():
    agg = build("excess_mtl")
    agg(torch.ones(2, 3, dtype=torch.float64))
    with pytest.raises(
        ValueError, match=r"ExcessMTL holds statistics for gradients of shape \(2, 3\) but got \(3, 3\); call reset\(\)"
    ):
        agg(torch.ones(3, 3, dtype=torch.float64))
    agg.reset()
    assert agg.calls == 0 and agg.sq_sum is None
    agg(torch.ones(3, 3, dtype=torch.float64))
    assert agg.sq_sum.shape == (3, 3)


def test_a_skipped_call_keeps_the_state_and_the_baseline_unset():
    """A NaN first call under check_finite="skip": zero step, state as before (uniform weights,
    statistics S + ε = ε, baseline unset), so the next call behaves as a first call (its α equals a
    fresh aggregator's after that call; only the call counter moved)."""
    calls = _calls(4, 3, 6, 2)
    bad = calls[0].clone()
    bad[1, 2] = float("nan")
    agg = build("excess_mtl", check_finite="skip")
    assert torch.equal(agg(bad), torch.zeros(6, dtype=torch.float64))
    assert agg.alpha.tolist() == pytest.approx([1 / 3] * 3) and torch.equal(
        agg.sq_sum, torch.full((3, 6), 1e-7, dtype=torch.float64)
    )
    assert float(agg.baseline.abs().max()) == 0.0
    fresh = build("excess_mtl")
    torch.testing.assert_close(agg(calls[1]), fresh(calls[1]), rtol=1e-14, atol=0)


def test_state_dict_round_trip_continues_identically():
    """Buffers and the call count (extra state) saved after 3 calls of a 2-call warm-up: a fresh
    module loaded from them gives the same directions afterwards."""
    calls = _calls(7, 4, 9, 6)
    agg = build("excess_mtl", warmup=2)
    for grads in calls[:3]:
        agg(grads)
    clone = build("excess_mtl", warmup=2)
    clone.load_state_dict(agg.state_dict())
    assert clone.calls == 3
    for grads in calls[3:]:
        torch.testing.assert_close(clone(grads), agg(grads), rtol=0, atol=0)
