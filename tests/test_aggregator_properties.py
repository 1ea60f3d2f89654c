"""Properties every method promises, over many seeded random Jacobians (spec §5 of the anchors)."""

import pytest
import torch

from morl.aggregators import build
from morl.solvers import min_norm_gap

NAMES = ("mean", "mgda", "smg", "pcgrad", "cagrad", "moco")
SCALES = (1e-12, 1e-6, 1.0, 1e6, 1e12)


def sample_jacobian(gen, k, d, rank=None, scale=1.0, dtype=torch.float64, shared=0.5):
    """K×D matrix of the given rank, with a shared component so that methods differ."""
    rank = max(1, min(rank or min(k, d), k, d))
    u = torch.randn(k, rank, generator=gen, dtype=torch.float64)
    v = torch.randn(rank, d, generator=gen, dtype=torch.float64)
    j = u @ v / rank**0.5 + shared * torch.randn(1, d, generator=gen, dtype=torch.float64)
    return (j * scale).to(dtype)


def jacobians(gen, n=12):
    shapes = [(2, 5), (3, 3), (5, 40), (8, 4), (20, 50)]
    for i in range(n):
        k, d = shapes[i % len(shapes)]
        rank = [None, 1, max(1, k // 2)][i % 3]
        yield sample_jacobian(gen, k, d, rank=rank, scale=SCALES[i % len(SCALES)])


# -- structure ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shape_dtype_finite_at_all_scales(name, dtype, gen):
    for scale in SCALES:
        for k, d in ((1, 4), (2, 7), (6, 30)):
            agg = build(name)
            j = sample_jacobian(gen, k, d, scale=scale, dtype=dtype)
            out = agg(j)
            assert out.shape == (d,) and out.dtype == dtype and out.device == j.device
            assert torch.isfinite(out).all(), (name, scale, k)
            assert agg.weights is not None and agg.weights.shape == (k,)
            assert torch.isfinite(agg.weights).all()


@pytest.mark.parametrize("name", NAMES)
def test_degenerate_matrices_are_finite(name, gen):
    g = torch.randn(9, generator=gen, dtype=torch.float64)
    cases = {
        "zero rows": torch.stack([torch.zeros_like(g), g, torch.zeros_like(g)]),
        "all zero": torch.zeros(4, 9, dtype=torch.float64),
        "identical": g.repeat(5, 1),
        "colinear": torch.stack([g, 3 * g, -2 * g, 1e-9 * g]),
        "K=200": sample_jacobian(gen, 200, 60),
    }
    for what, j in cases.items():
        out = build(name)(j)
        assert torch.isfinite(out).all(), (name, what)


@pytest.mark.parametrize("name", NAMES)
def test_k1_returns_the_gradient_up_to_the_documented_scale(name, gen):
    g = torch.randn(1, 11, generator=gen, dtype=torch.float64)
    agg = build(name)
    out = agg(g)
    factor = {"cagrad": (1 + 0.5) / (1 + 0.5**2), "moco": 0.5}.get(name, 1.0)  # MoCo: Y_1 = β_0 g
    torch.testing.assert_close(out, factor * g[0])


@pytest.mark.parametrize("name", NAMES)
def test_nan_and_inf_raise_naming_the_objective(name):
    j = torch.ones(3, 4)
    j[1, 2] = float("nan")
    with pytest.raises(ValueError, match="objective 1"):
        build(name)(j)
    j[1, 2] = 1.0
    j[2, 0] = float("inf")
    with pytest.raises(ValueError, match="objective 2"):
        build(name)(j)


# -- MGDA ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mgda", "smg"])
def test_mgda_common_descent_and_kkt(name, gen):
    for j in jacobians(gen, n=25):
        agg = build(name)
        d = agg(j)
        # Lemma 6 at the vertices: g_k·d ≥ ‖d‖² (relative to the scale of the gradients)
        unit = j.norm(dim=1).max() ** 2
        assert ((j @ d - d @ d) >= -1e-6 * unit).all()
        w = agg.weights
        assert (w >= 0).all() and abs(w.sum().item() - 1) < 1e-9
        assert min_norm_gap(j @ j.T, w).item() < 1e-6


def test_mgda_scale_invariant_weights_linear_direction(gen):
    for j in jacobians(gen, n=10):
        agg = build("mgda")
        d1 = agg(j)
        w1 = agg.weights
        d2 = agg(j * 1e7)
        if torch.linalg.matrix_rank(j) == j.shape[0]:  # λ* is unique only for independent rows
            torch.testing.assert_close(agg.weights, w1, atol=1e-7, rtol=0)
        torch.testing.assert_close(d2, 1e7 * d1, rtol=1e-6, atol=1e-6 * (1e7 * j).abs().max().item())


@pytest.mark.parametrize("name", ["mean", "mgda", "cagrad"])
def test_permutation_invariance(name, gen):
    for j in jacobians(gen, n=10):
        perm = torch.randperm(j.shape[0], generator=gen)
        agg = build(name)
        d = agg(j)
        w = agg.weights
        dp = agg(j[perm])
        tol = 1e-6 * j.norm(dim=1).max().item()
        torch.testing.assert_close(dp, d, atol=tol, rtol=1e-6)
        torch.testing.assert_close(agg.weights @ j[perm], w @ j, atol=tol, rtol=1e-6)


def test_mean_is_linear_and_exact(gen):
    j = sample_jacobian(gen, 4, 6)
    torch.testing.assert_close(build("mean")(j), j.mean(0))
    torch.testing.assert_close(build("mean", reduction="sum")(2 * j), 2 * j.sum(0))


# -- PCGrad -------------------------------------------------------------------------------------
def test_pcgrad_two_task_closed_form(gen):
    for _ in range(30):
        j = sample_jacobian(gen, 2, 7, shared=0.0) * 10 ** torch.empty(1).uniform_(-8, 8, generator=gen).item()
        g1, g2 = j
        g12, g11, g22 = g1 @ g2, g1 @ g1, g2 @ g2
        expected = ((1 - g12 / g11) * g1 + (1 - g12 / g22) * g2) / 2 if g12 < 0 else (g1 + g2) / 2
        torch.testing.assert_close(build("pcgrad")(j), expected, rtol=1e-9, atol=1e-9 * j.abs().max().item())
        torch.testing.assert_close(build("pcgrad", reduction="sum")(j), 2 * expected, rtol=1e-9, atol=1e-9 * j.abs().max().item())


def _pcgrad_loop(j, orders):
    """Plain per-task loop of the paper's algorithm with the given orders (reference)."""
    out = []
    for i in range(j.shape[0]):
        gi = j[i].clone()
        for jj in orders[i].tolist():
            if jj == i:
                continue
            dot = gi @ j[jj]
            if dot < 0 and j[jj] @ j[jj] > 0:
                gi = gi - dot / (j[jj] @ j[jj]) * j[jj]
        out.append(gi)
    return torch.stack(out).mean(0)


def test_pcgrad_matches_loop_and_is_reproducible(gen):
    for k in (3, 6, 15):
        j = sample_jacobian(gen, k, 12, shared=-0.2)
        agg = build("pcgrad", seed=3)
        orders = torch.Generator().manual_seed(3)
        expected = _pcgrad_loop(j, torch.stack([torch.randperm(k, generator=orders) for _ in range(k)]))
        torch.testing.assert_close(agg(j), expected)
        torch.testing.assert_close(build("pcgrad", seed=3)(j), expected)


def test_pcgrad_non_conflicting_rows_give_the_mean(gen):
    j = torch.rand(5, 8, generator=gen, dtype=torch.float64)  # all inner products > 0
    torch.testing.assert_close(build("pcgrad")(j), j.mean(0))


# -- CAGrad -------------------------------------------------------------------------------------
def test_cagrad_stays_in_the_c_ball(gen):
    for c in (0.1, 0.5, 0.9, 2.0):
        for j in jacobians(gen, n=6):
            g0 = j.mean(0)
            d = build("cagrad", c=c, rescale=0)(j)
            r = c * g0.norm()
            assert (d - g0).norm() <= r * (1 + 1e-6) + 1e-12 * j.abs().max()
            # the solution lies on the boundary unless the mean is 0
            assert (d - g0).norm() >= r * (1 - 1e-4)
            torch.testing.assert_close(build("cagrad", c=c, rescale=1)(j), d / (1 + c**2), rtol=1e-6, atol=0)
            torch.testing.assert_close(build("cagrad", c=c, rescale=2)(j), d / (1 + c), rtol=1e-6, atol=0)


def test_cagrad_c0_is_mean_and_improves_worst_task(gen):
    for j in jacobians(gen, n=8):
        torch.testing.assert_close(build("cagrad", c=0.0)(j), j.mean(0))
        g0 = j.mean(0)
        d = build("cagrad", c=0.5, rescale=0)(j)
        # primal: d maximises the worst inner product inside the ball; g0 is feasible
        assert (j @ d).min() >= (j @ g0).min() - 1e-9 * j.norm() ** 2


# -- state ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, options", [
    ("pcgrad", {}), ("moco", {}), ("moco", {"base": "pcgrad"}), ("moco", {"lambda_map": "softmax", "order": "paper"}),
    ("mean", {}), ("mgda", {}), ("cagrad", {}), ("mgda", {"warm_start": True}), ("cagrad", {"warm_start": True}),
])
def test_state_round_trip_reproduces_next_outputs(name, options, gen):
    mats = [sample_jacobian(gen, 4, 9, shared=-0.3) for _ in range(8)]
    agg = build(name, **options)
    for j in mats[:4]:
        agg(j)
    state = agg.state_dict()
    expected = [agg(j) for j in mats[4:]]
    fresh = build(name, **options)
    fresh.load_state_dict(state)
    for j, e in zip(mats[4:], expected):
        assert torch.equal(fresh(j), e)
    agg.load_state_dict(state)  # the same object rewinds too
    for j, e in zip(mats[4:], expected):
        assert torch.equal(agg(j), e)


@pytest.mark.parametrize("name", ["pcgrad", "moco"])
def test_reset_restores_first_output(name, gen):
    mats = [sample_jacobian(gen, 3, 5, shared=-0.3) for _ in range(3)]
    agg = build(name)
    first = agg(mats[0])
    for j in mats[1:]:
        agg(j)
    agg.reset()
    assert torch.equal(agg(mats[0]), first)


@pytest.mark.parametrize("name", ["mgda", "cagrad"])
def test_warm_start_gives_the_same_directions(name, gen):
    cold, warm = build(name), build(name, warm_start=True)
    base = sample_jacobian(gen, 6, 20)
    for _ in range(5):
        j = base + 0.05 * torch.randn(base.shape, generator=gen, dtype=base.dtype)
        torch.testing.assert_close(warm(j), cold(j), rtol=1e-4, atol=1e-5 * j.norm().item())
    assert warm.state_dict()["w_prev"].shape == (6,)
