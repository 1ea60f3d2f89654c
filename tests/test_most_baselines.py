"""The ZDT baselines of the MosT paper (morl.most_baselines): linearisation, MGDA, EPO, and MOO-SVGD
(its MGDA part, the kernel term, spread on ZDT-1, bad input).

The SVGD spread check runs plain gradient steps at the paper's lr 0.005 (Li et al., arXiv:2403.04099,
App. D.1) for 300 steps, m = 5. Minimum pairwise distance of the final points in objective space
(init seeds 27 / 0 / 1 / 2 / 3): MGDA 0.121 / 0.356 / 0.244 / 0.114 / 0.318; SVGD (objective kernel,
α = 1) 0.737 / 0.654 / 0.829 / 0.915 / 0.922; SVGD with α = 0 0.080 / 0.395 / 0.266 / 0.125 / 0.364.
"""

import math

import pytest
import torch

from morl import aggregators
from morl import most as M
from morl import most_baselines as B
from morl.metrics import most_metrics as MM
from morl.most import losses_and_jacobians
from morl.problems import zdt as Z

SETTING = dict(lr=0.01, steps=150, project=Z.project, step="sign")


THRESHOLDS = {"linearisation": 5.65, "mgda": 5.25, "epo": 5.60}


def _zdt1(x):
    return Z.zdt("zdt1", x)


def _most_e_best_hv(seed):
    most = M.MosTE(5, 2, num_aux=25, dirichlet_shape=1.0, include_original=False, seed=0, gamma_scale="code")
    best = []
    cb = lambda t, th, g: best.append(float(MM.hypervolume(_zdt1(th), Z.REFERENCE_POINTS["zdt1"])))  # noqa: E731
    M.run(_zdt1, _x0(seed), most, lr=0.01, rounds=150, project=Z.project, callback=cb, step="sign")
    return max(best)


@pytest.mark.parametrize("method", [B.linearisation, B.mgda, B.epo], ids=lambda f: f.__name__)
def test_baseline_reaches_front_on_zdt1(method):
    hv, final = B.best_hypervolume(method, _zdt1, _x0(27), Z.REFERENCE_POINTS["zdt1"], **SETTING)
    assert hv >= THRESHOLDS[method.__name__]
    assert hv <= float(MM.hypervolume(Z.pareto_front("zdt1", 2000), Z.REFERENCE_POINTS["zdt1"])) + 1e-9
    f = B.objectives_batched(_zdt1, final)
    assert bool(torch.isfinite(f).all())
    # On the front: x_2..x_30 at the box floor (g = 1) and f2 = 1 − √f1.
    g = 1 + 9 / 29 * final[:, 1:].sum(-1)
    assert float((g - 1).max()) < 1e-3
    torch.testing.assert_close(f[:, 1], 1 - f[:, 0].sqrt(), atol=1e-3, rtol=0)


def test_epo_spreads_along_its_preferences():
    # A larger r_k pushes J_k lower: preferences ordered by rising r_2 give falling f2, rising f1.
    final = B.epo(_zdt1, _x0(27), **SETTING)
    f1 = B.objectives_batched(_zdt1, final)[:, 0]
    assert bool((f1[1:] >= f1[:-1] - 1e-9).all()) and float(f1[-1] - f1[0]) > 0.5


# MosT-E minus linearisation (best HV) for x0 seeds 0..9 and 27 depends on the CPU's kernels (sign
# steps turn rounding into other trajectories): its mean was −0.25 on one machine and +0.06 on
# another, so the paper's "MosT-E ≥ linearisation" does not hold everywhere. Asserted: what holds
# on both, MosT-E within 0.5 of linearisation on average over the eleven starts.
@pytest.mark.integration  # twenty-two long runs
def test_most_e_within_half_a_unit_of_linearisation_on_average():
    seeds = [*range(10), 27]
    gaps = [
        _most_e_best_hv(seed)
        - B.best_hypervolume(B.linearisation, _zdt1, _x0(seed), Z.REFERENCE_POINTS["zdt1"], **SETTING)[0]
        for seed in seeds
    ]
    assert sum(gaps) / len(gaps) >= -0.5, gaps


def test_helpers_and_bad_input():
    w = B.simplex_weights(4)
    torch.testing.assert_close(w.sum(1), torch.ones(4, dtype=torch.float64))
    assert bool((w > 0).all())
    r = B.circle_preferences(5)
    torch.testing.assert_close(r.norm(dim=1), torch.ones(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="step"):
        B.linearisation(_zdt1, _x0(0), lr=0.01, steps=1, step="adam")
    with pytest.raises(ValueError, match="weights must have shape"):
        B.linearisation(_zdt1, _x0(0), lr=0.01, steps=1, weights=torch.ones(3, 2))
    with pytest.raises(ValueError, match="preferences must have shape"):
        B.epo(_zdt1, _x0(0), lr=0.01, steps=1, preferences=torch.ones(2, 2))


def _x0(seed, m=5):
    return torch.rand(m, 30, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _quadratics(theta):
    # Three conflicting objectives ‖θ − c_i‖² with distinct centres: a non-trivial min-norm problem.
    centres = torch.tensor([[1.0, 0.0, 0.5, -1.0], [0.0, 2.0, -0.5, 0.0], [-1.0, -1.0, 1.0, 1.0]], dtype=theta.dtype)
    return ((theta - centres) ** 2).sum(-1)


def _min_pairwise(objectives, thetas):
    f = B.objectives_batched(objectives, thetas)
    d = torch.cdist(f, f)
    d.fill_diagonal_(float("inf"))
    return float(d.min())


# (a) No repulsion and a kernel that is the identity (a bandwidth so small that exp underflows to 0
# off the diagonal): v_i = d_i / m, i.e. m independent MGDA runs.
TINY = 1e-300


@pytest.mark.parametrize("step", ["sign", "gd"])
def test_no_repulsion_identity_kernel_is_independent_mgda(step):
    x0, m = _x0(27), 5
    lr = 0.01 if step == "sign" else 0.002
    ref = B.mgda(_zdt1, x0, lr=lr, steps=40, project=Z.project, step=step)
    # sign(d/m) = sign(d); for gd the 1/m is undone by the learning rate.
    out = B.svgd(
        _zdt1,
        x0,
        lr=lr * (m if step == "gd" else 1),
        steps=40,
        project=Z.project,
        step=step,
        repulsion=0.0,
        bandwidth=TINY,
    )
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)


@pytest.mark.parametrize("n", [2, 3, 12])
def test_batched_mgda_directions_match_the_aggregator(n):
    gen = torch.Generator().manual_seed(n)
    scales = torch.tensor([1e-6, 1.0, 1e6, 3.0], dtype=torch.float64)[:, None, None]  # scale-free per particle
    jac = torch.randn(4, n, 7, generator=gen, dtype=torch.float64) * scales
    agg = aggregators.build("mgda")
    ref = torch.stack([aggregators.build("mgda")(jac[j]) for j in range(4)])
    out = B.mgda_directions(jac, agg)
    # In units of each particle's largest row, not of its direction: at n = 12 rows in R^7 a
    # particle can be Pareto-stationary, its direction ~1e-12 of the rows, pure rounding (divided
    # by its own norm it differed by 6.8e-5 on one CPU and not on another).
    # Measured over seeds 0-99: ≤ 2.8e-16 for n = 2, 3 and 12; bound 1e-12.
    scale = jac.norm(dim=2).amax(dim=1, keepdim=True)
    torch.testing.assert_close(out / scale, ref / scale, atol=1e-12, rtol=0)


def test_no_repulsion_mixes_directions_through_the_kernel():
    x0 = torch.randn(4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    losses, jac = losses_and_jacobians(_quadratics, x0)
    agg = aggregators.build("mgda")
    d = B.mgda_directions(jac, agg)
    k, _ = B.rbf_kernel(losses)
    v = B.svgd_direction(losses, jac, x0, agg, repulsion=0.0)
    torch.testing.assert_close(v, k @ d / 4)
    assert float((v - d / 4).abs().max()) > 1e-3  # the kernel is not the identity at the median bandwidth


# (b) The repulsive term against autograd: R_i = ∇_{θ_i} Σ_j k(θ_i, θ_j) with the bandwidth held fixed.
def _autograd_repulsion(points_of, thetas, h):
    rows = []
    for i in range(thetas.shape[0]):
        ti = thetas[i].clone().requires_grad_(True)
        others = points_of(thetas).detach()
        pi = points_of(ti.unsqueeze(0))[0]
        total = torch.exp(-((pi - others) ** 2).sum(-1) / h).sum()
        rows.append(torch.autograd.grad(total, ti)[0])
    return torch.stack(rows)


@pytest.mark.parametrize("kernel", B.KERNEL_SPACES)
@pytest.mark.parametrize("bandwidth", [None, 0.7])
def test_kernel_term_matches_autograd(kernel, bandwidth):
    thetas = torch.randn(5, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    losses, jac = losses_and_jacobians(_quadratics, thetas)
    points_of = (lambda t: torch.func.vmap(_quadratics)(t)) if kernel == "objectives" else (lambda t: t)
    pts = points_of(thetas)
    sq = ((pts[:, None] - pts[None]) ** 2).sum(-1)
    # Median heuristic by hand: the middle of the 25 squared distances (diagonal zeros included) / log 5.
    h = sorted(sq.flatten().tolist())[12] / math.log(5) if bandwidth is None else bandwidth
    if bandwidth is None:
        assert float(B.median_bandwidth(sq)) == pytest.approx(h, rel=1e-12)
    ref = _autograd_repulsion(points_of, thetas, h)
    agg = aggregators.build("mgda")
    d = B.mgda_directions(jac, agg)
    k = torch.exp(-sq / h)
    v = B.svgd_direction(losses, jac, thetas, agg, bandwidth=bandwidth, repulsion=2.5, kernel=kernel)
    torch.testing.assert_close(v, (k @ d + 2.5 * ref) / 5, atol=1e-12, rtol=1e-10)


def test_repulsion_pushes_close_particles_apart():
    # Two particles close in θ: descending the kernel term alone increases their distance.
    thetas = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0], [3.0, 3.0, 3.0, 3.0]], dtype=torch.float64)
    _, rep = B.rbf_kernel(thetas)
    moved = thetas - 0.01 * rep
    assert float((moved[0] - moved[1]).norm()) > float((thetas[0] - thetas[1]).norm())


# (c) On ZDT-1 the repulsion spreads the particles: larger minimum pairwise distance in objective space
# than MGDA and than SVGD without repulsion, from the same start.
@pytest.mark.integration  # a long run
def test_svgd_spreads_more_than_mgda_on_zdt1():
    kw = dict(lr=0.005, steps=300, project=Z.project, step="gd")
    x0 = _x0(27)
    mgda = _min_pairwise(_zdt1, B.mgda(_zdt1, x0, **kw))
    plain = _min_pairwise(_zdt1, B.svgd(_zdt1, x0, repulsion=0.0, **kw))
    svgd_final = B.svgd(_zdt1, x0, **kw)
    spread = _min_pairwise(_zdt1, svgd_final)
    # spread / max(mgda, plain) over x0 seeds 0..17 and 27: min 1.66 (seed 0), 6.07 at seed 27.
    assert spread > 1.3 * mgda and spread > 1.3 * plain, (spread, mgda, plain)
    assert bool(torch.isfinite(svgd_final).all())


def test_best_hypervolume_accepts_svgd():
    hv, final = B.best_hypervolume(
        B.svgd, _zdt1, _x0(27), Z.REFERENCE_POINTS["zdt1"], lr=0.01, steps=150, project=Z.project, step="sign"
    )
    # Measured 5.428 at seed 27; over x0 seeds 0..17: min 5.342, max 5.810.
    assert 5.2 < hv < 6.0
    assert final.shape == (5, 30)


# (d) Bad input.
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(bandwidth=0.0), "bandwidth must be None"),
        (dict(bandwidth=-1.0), "bandwidth must be None"),
        (dict(bandwidth=float("nan")), "bandwidth must be None"),
        (dict(repulsion=-0.5), "repulsion must be"),
        (dict(kernel="rbf"), "kernel='rbf' is not valid; allowed: objectives, params"),
        (dict(step="adam"), "step='adam' is not valid"),
        (dict(warm_start=True), "warm_start"),
    ],
)
def test_bad_options_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        B.svgd(_zdt1, _x0(0), lr=0.01, steps=1, **kwargs)


def test_bad_shapes_and_nonfinite_raise():
    with pytest.raises(ValueError, match=r"thetas must be a floating-point tensor \[m, D\], got \(30,\)"):
        B.svgd(_zdt1, _x0(0)[0], lr=0.01, steps=1)
    with pytest.raises(ValueError, match="ZDT takes x of shape"):
        B.svgd(_zdt1, torch.rand(5, 7, dtype=torch.float64), lr=0.01, steps=1)
    with pytest.raises(ValueError, match=r"loss vector \[n\]"):
        B.svgd(lambda x: (x**2).sum(), _x0(0), lr=0.01, steps=1)
    bad = lambda x: torch.stack([x.sum(), torch.log(x[0] - 0.5)])  # noqa: E731 — NaN for x_1 < 0.5
    with pytest.raises(ValueError, match="non-finite"):
        B.svgd(bad, _x0(0), lr=0.01, steps=1)
    x0 = _x0(0)
    out = B.svgd(bad, x0, lr=0.01, steps=3, check_finite="skip")
    torch.testing.assert_close(out, x0)
