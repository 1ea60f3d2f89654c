"""JoGBa (Alg. 1), GraB (Algs. 3/4) and the simple orderings: exact semantics against an
independent numpy transcription of Alg. 1, the reductions, and the discrepancy gains
calibrated by numpy simulations on static synthetic gradients."""

import numpy as np
import pytest
import torch

from morl.ordering import (
    FlipFlop,
    GraBSeparate,
    GraBShared,
    JoGBa,
    RandomFlipFlop,
    RandomReshuffle,
    build,
    combined_discrepancy,
    greedy_signs,
    herding,
    signed_prefix_discrepancy,
)
from tests.ordering.jogba_reference import numpy_jogba_epoch


def run_static(ordering, G, epochs, lam=None):
    """Feed static per-sample gradients G [M, K, d] (unit k = sample k) for some epochs."""
    M = G.shape[0]
    lam = torch.full((M,), 1.0 / M, dtype=G.dtype) if lam is None else lam
    for _ in range(epochs):
        for k, units in enumerate(ordering.iter_units()):
            grads = G[torch.arange(M), units]
            ordering.observe(k, grads, lam @ grads)
    return ordering.orders()


def make(cls, G, **kw):
    M, K, _ = G.shape
    return cls(K, M, batch_size=1, shuffle_units=False, **kw)


def gaussian_grads(M, K, d, seed, corr=0.6, offset=0.5):
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(1, K, d, generator=g, dtype=torch.float64)
    own = torch.randn(M, K, d, generator=g, dtype=torch.float64)
    mean = offset * torch.randn(M, 1, d, generator=g, dtype=torch.float64)
    return corr**0.5 * shared + (1 - corr) ** 0.5 * own + mean


@pytest.mark.parametrize("centering", ["joint_sum", "per_objective", "joint_mean", "none"])
@pytest.mark.parametrize("norm", ["inf", "l2"])
def test_jogba_matches_numpy_reference_over_epochs(centering, norm):
    G = gaussian_grads(3, 24, 5, seed=1)
    jog = make(JoGBa, G, centering=centering, norm=norm, seed=3)
    perms = jog.orders().numpy()
    v = {"sum": np.zeros(5), "pm": np.zeros((3, 5))}
    for _ in range(4):
        perms, v = numpy_jogba_epoch(G.numpy(), perms, v, centering, np.inf if norm == "inf" else 2)
        run_static(jog, G, 1)
        np.testing.assert_array_equal(jog.orders().numpy(), perms)


@pytest.mark.parametrize("cls", [JoGBa, GraBSeparate, GraBShared, RandomReshuffle, FlipFlop, RandomFlipFlop])
def test_every_epoch_is_a_permutation_and_built_from_the_signs(cls):
    G = gaussian_grads(3, 40, 6, seed=2)
    o = make(cls, G, seed=0)
    for _ in range(5):
        before = o.orders()
        run_static(o, G, 1)
        after = o.orders()
        for m in range(3):
            assert sorted(after[m].tolist()) == list(range(40))
        if o.needs_gradients:
            signs = o.last_signs
            for m in range(3):
                plus = before[m][signs[m]].tolist()
                minus = before[m][~signs[m]].tolist()
                assert after[m].tolist() == plus + minus[::-1]


@pytest.mark.parametrize("norm", ["inf", "l2"])
def test_single_objective_reduces_to_grab(norm):
    G = gaussian_grads(1, 64, 8, seed=4)
    orders = [run_static(make(cls, G, seed=5, norm=norm), G, 6) for cls in (JoGBa, GraBSeparate, GraBShared)]
    # GraBShared with λ = 1 balances the same vector.
    assert torch.equal(orders[0], orders[1]) and torch.equal(orders[1], orders[2])


def test_separate_equals_independent_single_objective_runs():
    G = gaussian_grads(3, 32, 4, seed=6)
    sep = run_static(make(GraBSeparate, G, seed=1, init_order="identity"), G, 4)
    for m in range(3):
        one = run_static(make(GraBSeparate, G[m : m + 1], seed=1, init_order="identity"), G[m : m + 1], 4)
        assert torch.equal(sep[m], one[0])


def test_grab_shared_keeps_one_order_and_depends_on_lambda():
    G = gaussian_grads(3, 48, 6, seed=7)
    a = run_static(make(GraBShared, G, seed=2), G, 4)
    assert all(torch.equal(a[0], a[m]) for m in range(3))
    b = run_static(make(GraBShared, G, seed=2), G, 4, lam=torch.tensor([0.8, 0.1, 0.1], dtype=G.dtype))
    assert not torch.equal(a, b)


@pytest.mark.parametrize("cls", [JoGBa, GraBSeparate])
def test_orders_do_not_depend_on_the_aggregator(cls):
    G = gaussian_grads(3, 48, 6, seed=8)
    a = run_static(make(cls, G, seed=2), G, 4)
    b = run_static(make(cls, G, seed=2), G, 4, lam=torch.tensor([0.8, 0.1, 0.1], dtype=G.dtype))
    assert torch.equal(a, b)


def test_tie_gives_plus_and_zero_objective_keeps_its_order():
    assert bool(greedy_signs(torch.zeros(3), torch.zeros(3), "inf"))
    assert bool(greedy_signs(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), "l2"))
    G = gaussian_grads(2, 30, 4, seed=9)
    G[1] = 0.0
    o = make(JoGBa, G, centering="per_objective", init_order="random_per_objective", seed=3)
    for _ in range(3):
        before = o.orders()[1]
        run_static(o, G, 1)
        assert torch.equal(o.orders()[1], before)


def test_shared_s_is_updated_sequentially_within_an_iteration():
    # d = 2, K = 3. At k = 0, s = 0 so objective 1 gets +1 and s = (1, 0). Objective 2's
    # gradient (1, 0.5): with s = (1, 0) already applied, ‖s+g‖∞ = 2 > ‖s−g‖∞ = 0.5 -> −1;
    # were it compared against s = 0 (a parallel update), the tie would give +1.
    G = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], [[1.0, 0.5], [0.0, 0.0], [0.0, 0.0]]], dtype=torch.float64)
    o = make(JoGBa, G, init_order="identity", centering="none")
    run_static(o, G, 1)
    assert o.last_signs[:, 0].tolist() == [True, False]
    assert o.orders()[1].tolist() == [1, 2, 0]  # sample 0 went to the back


def test_after_an_epoch_each_ordering_centres_on_its_mean_gradient():
    G = gaussian_grads(3, 20, 4, seed=10)
    joint = make(JoGBa, G)
    run_static(joint, G, 1)
    torch.testing.assert_close(joint.v, G.mean(1).sum(0))
    per = make(JoGBa, G, centering="per_objective")
    run_static(per, G, 1)
    torch.testing.assert_close(per.v, G.mean(1))
    sep = make(GraBSeparate, G)
    run_static(sep, G, 1)
    torch.testing.assert_close(sep.v, G.mean(1))
    lam = torch.tensor([0.5, 0.3, 0.2], dtype=G.dtype)
    shared = make(GraBShared, G)
    run_static(shared, G, 1, lam=lam)
    torch.testing.assert_close(shared.v, (lam[:, None] * G.mean(1)).sum(0))


def test_reorder_lemma_holds_per_objective():
    # max_j ‖prefix_j(π')‖∞ <= ½(max‖S_k‖∞ + max‖D_k‖∞) + ‖S_K‖∞ for any signs (the reordering lemma behind GraB).
    gen = torch.Generator().manual_seed(11)
    for trial in range(50):
        K, d = 16 + trial, 3
        z = torch.randn(K, d, generator=gen, dtype=torch.float64)
        signs = torch.rand(K, generator=gen) < 0.5
        new = torch.cat([torch.arange(K)[signs], torch.arange(K)[~signs].flip(0)])
        lhs = z[new].cumsum(0).abs().amax()
        S = z.cumsum(0)
        rhs = 0.5 * (S.abs().amax() + signed_prefix_discrepancy(z, signs)) + S[-1].abs().amax()
        assert lhs <= rhs + 1e-9


def test_greedy_signs_beat_random_signs():
    # Median ratio of signed-prefix discrepancy, greedy / random, over 20 draws (d <= K/2).
    gen = torch.Generator().manual_seed(12)
    ratios = []
    for _ in range(20):
        z = torch.randn(64, 4, generator=gen, dtype=torch.float64)
        z = z / z.norm(dim=1).max()
        s, signs = torch.zeros(4, dtype=torch.float64), []
        for zk in z:
            plus = greedy_signs(s, zk, "inf")
            s += zk if plus else -zk
            signs.append(bool(plus))
        rand = torch.rand(64, generator=gen) < 0.5
        ratios.append(float(signed_prefix_discrepancy(z, torch.tensor(signs)) / signed_prefix_discrepancy(z, rand)))
    assert float(np.median(ratios)) <= 0.65


def test_single_objective_herding_improves_over_epochs():
    # K = 64, d = 8, static vectors with a mean offset, 8 epochs.
    ratios2, ratios8 = [], []
    for seed in range(6):
        G = gaussian_grads(1, 64, 8, seed=100 + seed, corr=0.0, offset=1.0)
        gen = torch.Generator().manual_seed(seed)
        rand = float(torch.stack([herding(torch.randperm(64, generator=gen), G[0]) for _ in range(20)]).mean())
        o = make(JoGBa, G, seed=seed)
        run_static(o, G, 2)
        ratios2.append(float(herding(o.orders()[0], G[0])) / rand)
        run_static(o, G, 6)
        ratios8.append(float(herding(o.orders()[0], G[0])) / rand)
    assert np.median(ratios8) <= 0.6
    assert np.median(ratios8) <= np.median(ratios2) + 0.05


def random_discrepancy(G, shared, gen, draws=10):
    M, K, _ = G.shape
    vals = []
    for _ in range(draws):
        perms = (
            torch.randperm(K, generator=gen).repeat(M, 1)
            if shared
            else torch.stack([torch.randperm(K, generator=gen) for _ in range(M)])
        )
        vals.append(combined_discrepancy(perms, G))
    return float(torch.stack(vals).mean())


@pytest.mark.integration  # a statistical check over six instances
def test_combined_discrepancy_far_below_random_orders():
    # M = 3, K = 128, d = 16, correlation 0.6, 5 epochs, 6 instances; gates calibrated on numpy simulations.
    gen = torch.Generator().manual_seed(13)
    lit, per, sep, rnd = [], [], [], []
    for inst in range(6):
        G = gaussian_grads(3, 128, 16, seed=200 + inst)
        rnd.append(min(random_discrepancy(G, True, gen), random_discrepancy(G, False, gen)))
        lit.append(float(combined_discrepancy(run_static(make(JoGBa, G, seed=inst), G, 5), G)))
        per.append(
            float(combined_discrepancy(run_static(make(JoGBa, G, seed=inst, centering="per_objective"), G, 5), G))
        )
        sep.append(float(combined_discrepancy(run_static(make(GraBSeparate, G, seed=inst), G, 5), G)))
    lit, per, sep, rnd = map(np.array, (lit, per, sep, rnd))
    assert (lit / rnd).mean() <= 0.8
    assert (per / rnd).mean() <= 0.6
    assert per.mean() < sep.mean()


def test_sampler_yields_objective_blocks_for_a_dataloader():
    data = torch.utils.data.TensorDataset(torch.arange(10.0)[:, None])
    o = build("random", 10, 2, batch_size=3, shared=False, seed=0)
    loader = torch.utils.data.DataLoader(data, batch_sampler=o)
    seen = 0
    for (x,) in loader:
        assert x.shape == (6, 1)
        seen += 1
    assert seen == len(o) == 4
    # every sample appears in some unit (the last unit wraps around)
    assert set(o.units.reshape(-1).tolist()) == set(range(10))
    assert o.epoch == 1


def test_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match="unknown ordering"):
        build("nope", 10, 2)
    with pytest.raises(ValueError, match="valid options"):
        build("jogba", 10, 2, centring="x")
    with pytest.raises(ValueError, match="centering"):
        JoGBa(10, 2, centering="bad")
    o = JoGBa(4, 2)
    with pytest.raises(ValueError, match="shape"):
        o.observe(0, torch.zeros(3, 5))
    with pytest.raises(ValueError, match="observed 1 of 4"):
        o.observe(0, torch.zeros(2, 5))
        o.end_epoch()
    with pytest.raises(ValueError, match="direction"):
        GraBShared(4, 2).observe(0, torch.zeros(2, 5))
