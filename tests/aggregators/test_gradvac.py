"""GradVac (Wang et al., ICLR 2021, arXiv 2010.05874): against a numpy transcription of
Algorithm 1 run on the gradient vectors themselves (not the Gramian), against TorchJD 0.18's
GradVac with the same task orders, PCGrad at zero targets, and a hand-computed two-call case."""

import numpy as np
import pytest
import torch
import torchjd.aggregation as tj

from morl.aggregators import build


def _orders(seed, k, calls):
    """The orders every implementation here draws: per call, per task i in order, one
    randperm(K − 1) of the other tasks (TorchJD's convention), from a generator seeded once."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(calls):
        per_task = []
        for i in range(k):
            others = [j for j in range(k) if j != i]
            per_task.append([others[p] for p in torch.randperm(k - 1, generator=gen).tolist()])
        out.append(per_task)
    return out


def _algorithm1(mats, orders, beta):
    """Algorithm 1 literally: g_i^PS corrected towards φ̂_ij in the given order, EMA after each
    pair, Δθ = Σ_i g_i^PS. Vectors in R^D, float64, one call per matrix."""
    k = mats[0].shape[0]
    phi_hat = np.zeros((k, k))
    outs = []
    for g, order in zip(mats, orders):
        ps = g.copy()
        for i in range(k):
            for j in order[i]:
                phi = ps[i] @ g[j] / (np.linalg.norm(ps[i]) * np.linalg.norm(g[j]))
                if phi < phi_hat[i, j]:
                    t = phi_hat[i, j]
                    w = (
                        np.linalg.norm(ps[i])
                        * (t * np.sqrt(1 - phi**2) - phi * np.sqrt(1 - t**2))
                        / (np.linalg.norm(g[j]) * np.sqrt(1 - t**2))
                    )
                    ps[i] = ps[i] + w * g[j]
                phi_hat[i, j] = (1 - beta) * phi_hat[i, j] + beta * phi
        outs.append(ps.sum(0))
    return outs, phi_hat


def _mats(seed, k, d, calls, shared=-0.3):
    gen = torch.Generator().manual_seed(1000 + seed)
    base = torch.randn(k, d, generator=gen, dtype=torch.float64)
    # slowly drifting gradients with a common (negative) component: conflicts, and targets that move
    return [
        base
        + 0.5 * torch.randn(k, d, generator=gen, dtype=torch.float64)
        + shared * torch.randn(1, d, generator=gen, dtype=torch.float64)
        for _ in range(calls)
    ]


@pytest.mark.parametrize("k", [2, 3, 5, 8])
@pytest.mark.parametrize("beta", [0.01, 0.5, 1.0])
def test_matches_algorithm1_over_several_calls(k, beta):
    """Measured over seeds 0..5, K ∈ {2, 3, 5, 8}, β ∈ {0.01, 0.5, 1}, 6 calls each: worst
    ‖d − d_ref‖/max‖g‖ = 2.2e-15, worst |φ̂ − φ̂_ref| = 3.3e-16; bounds 1e-10."""
    for seed in range(6):
        mats = _mats(seed, k, 11, 6)
        ref, ref_targets = _algorithm1([m.numpy() for m in mats], _orders(seed, k, 6), beta)
        agg = build("gradvac", beta=beta, seed=seed, reduction="sum")
        for m, r in zip(mats, ref):
            d = agg(m)
            assert np.abs(d.numpy() - r).max() <= 1e-10 * m.norm(dim=1).max().item(), seed
        assert np.abs(agg.targets.numpy() - ref_targets).max() <= 1e-10


@pytest.mark.parametrize("k", [2, 4, 7])
def test_matches_torchjd_with_the_same_orders(k):
    """TorchJD 0.18 draws the same randperm(K − 1) per task from the global generator; its eps is
    set to 0 (its default 1e-8 is added to the denominators). Sum = TorchJD's reduction.
    Measured over seeds 0..5 and 5 calls: worst error 4.8e-16 of max|d_tj|; bound 1e-10."""
    for seed in range(6):
        mats = _mats(seed, k, 13, 5)
        ours = build("gradvac", beta=0.3, seed=seed, reduction="sum")
        theirs = tj.GradVac(beta=0.3, eps=0.0)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            refs = [theirs(m) for m in mats]
        for m, r in zip(mats, refs):
            torch.testing.assert_close(ours(m), r, rtol=1e-10, atol=1e-10 * m.abs().max().item())


@pytest.mark.parametrize("k", [2, 3, 5])
def test_a_zero_row_has_cosine_zero_as_torchjds_eps_makes_it(k):
    """A zero gradient (a task whose loss is flat this step) has no direction: its cosine with
    any row counts as 0 (TorchJD with its default eps = 1e-8 in the denominators gets the same
    up to ~1e-8), so rows are corrected towards positive targets only from a defined cosine,
    and nothing turns NaN; the targets of its pairs decay towards 0. Row 1 is zero in every
    call. Measured over seeds 0..3 and 4 calls: worst
    difference 1.4e-9 of max|d_tj| (targets: 2.7e-10 absolute); bound 1e-6."""
    for seed in range(4):
        mats = [m.clone() for m in _mats(seed, k, 13, 4, shared=0.4)]
        for m in mats:
            m[1] = 0.0
        ours = build("gradvac", beta=0.5, seed=seed, reduction="sum")
        theirs = tj.GradVac(beta=0.5)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            refs = [theirs(m) for m in mats]
        for m, r in zip(mats, refs):
            d = ours(m)
            assert torch.isfinite(d).all() and torch.isfinite(ours.targets).all()
            assert (d - r).abs().max() <= 1e-6 * r.abs().max()
        # the targets too: the pairs with the zero row decay towards 0 (TorchJD's φ̂, its _phi_t)
        torch.testing.assert_close(ours.targets, theirs.gramian_weighting._phi_t, rtol=0, atol=1e-6)


def test_zero_targets_make_gradvac_pcgrad():
    """β = 0 keeps φ̂ = 0: the correction is then ‖g_i‖(0 − φ)/‖g_j‖ g_j = −(g_i·g_j/‖g_j‖²) g_j
    when g_i·g_j < 0, PCGrad's projection. With PCGrad given the same relative orders (each
    task's own index appended last, which PCGrad skips) the weights agree to rounding, call
    after call (measured 2.2e-16; bound 1e-12)."""
    for seed in range(6):
        for k in (2, 3, 6):
            mats = _mats(seed, k, 9, 3, shared=-0.6)
            vac = build("gradvac", beta=0.0, seed=seed)
            pc = build("pcgrad", seed=seed)
            for m, order in zip(mats, _orders(seed, k, 3)):
                full = torch.tensor([o + [i] for i, o in enumerate(order)])
                pc._draw_orders = lambda kk, device, full=full: full
                d_vac, d_pc = vac(m), pc(m)
                assert torch.allclose(vac.weights, pc.weights, rtol=0, atol=1e-12)
                assert torch.allclose(d_vac, d_pc, rtol=0, atol=1e-12 * m.abs().max().item())
            assert torch.equal(vac.targets, torch.zeros(k, k, dtype=torch.float64))


def test_two_hand_computed_calls_move_the_targets_to_the_cosines():
    """Call 1: g1 = (1, 0), g2 = (1, 1): no conflict (φ̂ = 0 ≤ φ), with β = 1 both targets
    become cos = 1/√2, d = g1 + g2 = (2, 1). Call 2: g1 = (1, 0), g2 = (0, 1), φ = 0 < 1/√2:
    g1' = g1 + ‖g1‖(φ̂·1 − 0)/(‖g2‖√(1 − φ̂²)) g2 = (1, 1), likewise g2' = (1, 1); d = (2, 2), and
    the targets move to the new cosines, 0."""
    agg = build("gradvac", beta=1.0, reduction="sum")
    d1 = agg(torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64))
    torch.testing.assert_close(d1, torch.tensor([2.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(agg.targets, torch.tensor([[0.0, 0.5**0.5], [0.5**0.5, 0.0]], dtype=torch.float64))
    d2 = agg(torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64))
    torch.testing.assert_close(d2, torch.tensor([2.0, 2.0], dtype=torch.float64))
    torch.testing.assert_close(agg.targets, torch.zeros(2, 2, dtype=torch.float64), atol=1e-15, rtol=0)
    mean = build("gradvac", beta=1.0)
    mean(torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64))
    torch.testing.assert_close(
        mean(torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)), torch.tensor([1.0, 1.0], dtype=torch.float64)
    )


def test_a_new_task_count_needs_a_reset_and_bad_options_are_refused():
    agg = build("gradvac", beta=0.5)
    agg(torch.randn(3, 5))
    with pytest.raises(ValueError, match=r"^GradVac: state 'targets' has shape \(3, 3\) but this call needs \(4, 4\)"):
        agg(torch.randn(4, 5))
    agg.reset()
    assert agg.targets is None and agg(torch.randn(4, 5)).shape == (5,)
    for bad in ({"beta": 1.5}, {"beta": -0.1}, {"seed": -1}, {"reduction": "max"}):
        with pytest.raises(ValueError, match="GradVac option"):
            build("gradvac", **bad)


def test_a_target_cosine_of_one_gives_a_finite_direction():
    """φ̂ = 1 asks for an infinite correction; √(1 − φ̂²) is floored (SIN_FLOOR), so d is finite."""
    agg = build("gradvac", beta=1.0, reduction="sum")
    agg(torch.tensor([[1.0, 0.0], [2.0, 0.0]], dtype=torch.float64))  # cos = 1 -> φ̂ = 1
    d = agg(torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64))
    assert torch.isfinite(d).all() and d[1] > 1e6  # pushed (almost) onto the partner
