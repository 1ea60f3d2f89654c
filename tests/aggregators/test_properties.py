"""Each method's published guarantees over GENERATED matrices of controlled rank, row-norm
spread and scale, in float32 and float64, for every registered method (the flags of
tests/aggregator_cases.py: TorchJD's property suite taken as the specification, written anew).
Tolerances are relative to the problem's own scale ‖g_k‖·max_j‖g_j‖ and to the dtype's rounding."""

from __future__ import annotations

import pytest
import torch
from aggregator_cases import all_configs
from jacobians import _conflict, cases, controlled, sample_jacobian, stationary

import morl
from morl.aggregators import build

DTYPES = (torch.float32, torch.float64)


REL_TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


STATIONARY_TOL = {torch.float32: 1e-4, torch.float64: 1e-10}


#: ‖d‖ / max‖g_k‖ at stationary points, over seeds 0-19 (MORL_TEST_SEED), K up to 25: MGDA and SMG
#: ≤ 9.0e-6 / 4.7e-12 (float32 / float64), CAGrad (c ≥ 1) exactly 0. UPGrad and DualProj solve
#: each projection iteratively to a relative tolerance: ≤ 3.4e-4 / 2.2e-10 (seed 0 alone stayed
#: under STATIONARY_TOL, seeds 1-3 did not).
PROJECTION_STATIONARY_TOL = {torch.float32: 1e-3, torch.float64: 1e-9}


#: Permutation bounds where 10 REL_TOL is not what the method can give, measured over seeds 0-19
#: (MORL_TEST_SEED). CAGrad's direction depends on sqrt(wᵀGw), and a float32 Gramian's rounding
#: on the row order (the product's blocking): up to 9.2e-4 of the scale on rank-deficient K = 6
#: rows (5.7e-13 in float64). IMTL-G solves on unit-normalised rows, as ill-conditioned as their
#: norms are spread: 8.3e-5 (float32, stationary K = 6) and 5.2e-9 (float64, K = 3, norms
#: spread over 1e6; seed 5 failed the 1e-9 bound). Within 2× of 10 REL_TOL in float32, so given
#: 3e-4 too: Nash-MTL and FairGrad 8.9e-5 (rank-deficient K = 6), ConFIG 5.7e-5. Every other
#: method stays ≤ 2e-6 (float32) and ≤ 1.4e-10 (float64).
PERMUTATION_TOL = {
    ("cagrad", torch.float32): 3e-3,
    ("imtl_g", torch.float32): 3e-4,
    ("imtl_g", torch.float64): 3e-8,
    ("nash_mtl", torch.float32): 3e-4,
    ("fairgrad", torch.float32): 3e-4,
    ("config", torch.float32): 3e-4,
}


CONFIGS = all_configs()


IDS = [f"{n}{'-' + '-'.join(f'{k}={v}' for k, v in o.items()) if o else ''}" for n, o, _ in CONFIGS]


def _call(agg, j, gen=None):
    losses = None
    if agg.needs_losses or not agg.needs_grads:
        g = gen or torch.Generator().manual_seed(1)
        losses = (torch.rand(j.shape[0], generator=g, dtype=torch.float64) + 0.5).to(j.dtype)
    return agg(j, losses)


# -- part 2: each method's guarantees over generated matrices ----------------------------------------
@pytest.mark.parametrize("name, options, case", CONFIGS, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_finite_for_every_finite_input(name, options, case, dtype, gen):
    g = torch.randn(12, generator=gen, dtype=torch.float64)
    extra = {
        "zero": torch.zeros(4, 12, dtype=torch.float64),
        "one zero row": torch.stack([g, 0 * g, -g]),
        "colinear": torch.stack([g, 3 * g, -2 * g, 1e-9 * g]),
        "identical": g.repeat(6, 1),
        "K=1": g[None],
        "K=64": controlled(gen, 64, 40, 40),
    }
    inputs = list(cases(gen, dtype, ks=(2, 12), spreads=(6.0,))) + [(k, v.to(dtype)) for k, v in extra.items()]
    for label, j in inputs:
        agg = build(name, **options)
        out = _call(agg, j)
        assert out.shape == (j.shape[1],) and out.dtype == dtype and torch.isfinite(out).all(), label
        assert agg.weights is None or agg.weights.dtype == dtype, label


def _select(flag):
    return [(n, o, c) for n, o, c in CONFIGS if getattr(c, flag)]


def _ids(rows):
    return [f"{n}{'-' + '-'.join(f'{k}={v}' for k, v in o.items()) if o else ''}" for n, o, _ in rows]


@pytest.mark.parametrize("name, options, case", _select("non_conflicting"), ids=_ids(_select("non_conflicting")))
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_conflicting(name, options, case, dtype, gen):
    for label, j in cases(gen, dtype, ks=(3, 10, 40), spreads=(6.0,)):
        d = _call(build(name, **options), j)
        assert _conflict(j, d) >= -REL_TOL[dtype], (label, _conflict(j, d))


@pytest.mark.parametrize("name, options, case", _select("stationary_zero"), ids=_ids(_select("stationary_zero")))
@pytest.mark.parametrize("dtype", DTYPES)
def test_strong_stationarity(name, options, case, dtype, gen):
    tol = (PROJECTION_STATIONARY_TOL if name in ("upgrad", "dualproj") else STATIONARY_TOL)[dtype]
    for k in (2, 3, 10, 25):
        for scale in (1e-12, 1.0, 1e12):
            j = stationary(gen, k, 20, max(1, k - 2), scale=scale, dtype=dtype)
            d = _call(build(name, **options), j).double()
            assert d.norm() <= tol * j.double().norm(dim=1).max(), (k, scale)
            positive = (torch.rand(k, 20, generator=gen, dtype=torch.float64) + 0.1).to(dtype) * scale
            d = _call(build(name, **options), positive).double()
            assert d.norm() >= 1e-3 * scale, (k, scale)


@pytest.mark.parametrize(
    "name, options, case", _select("permutation_invariant"), ids=_ids(_select("permutation_invariant"))
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_permutation_invariance(name, options, case, dtype, gen):
    """Relative to the larger of ‖d‖ and max‖g_k‖: Nash-MTL and FairGrad return a clipped,
    scale-free d (‖d‖ ≈ 1 for gradients of norm 1e-12), the others a d that scales with J."""
    method = "cagrad" if "cagrad" in (name, options.get("base")) else name
    tol = PERMUTATION_TOL.get((method, dtype), 10 * REL_TOL[dtype])
    for label, j in cases(gen, dtype, ks=(3, 15), spreads=(6.0,)):
        perm = torch.randperm(j.shape[0], generator=gen)
        d = _call(build(name, **options), j).double()
        dp = _call(build(name, **options), j[perm]).double()
        unit = torch.maximum(d.norm(), j.double().norm(dim=1).max())
        assert (dp - d).norm() <= tol * unit, label


@pytest.mark.parametrize("name, options, case", _select("linear"), ids=_ids(_select("linear")))
@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_under_scaling(name, options, case, dtype, gen):
    for label, j in cases(gen, dtype, ks=(3, 12)):
        if "s=1e" in label:  # the scaled matrices are out of range once scaled again by 1e±6
            continue
        # powers of two (~1e∓6): aJ is then exact, so the check is the method's homogeneity, not
        # how its answer moves with a rounding of J (1e-6·J rounds; IMTL-G at a stationary
        # K = 12 point then moved by 2.3e-3 of the scale, SDMGrad by 3.7e-3: conditioning)
        for a in (2.0**-20,) if j.shape[0] == 3 else (2.0**20,):
            d, da = _call(build(name, **options), j).double(), _call(build(name, **options), j * a).double()
            assert (da - a * d).norm() <= 10 * REL_TOL[dtype] * a * j.double().norm(dim=1).max(), (label, a)


@pytest.mark.parametrize("name, options, case", _select("stochastic"), ids=_ids(_select("stochastic")))
def test_seeded_draws_are_reproducible(name, options, case, gen):
    j = controlled(gen, 5, 13, 5)
    a, b = build(name, **options), build(name, **options)
    for _ in range(3):
        assert torch.equal(_call(a, j), _call(b, j))


@pytest.mark.parametrize("name", ("mean", "mgda", "smg", "pcgrad", "cagrad", "moco"))
def test_k1_returns_the_gradient_up_to_the_documented_scale(name, gen):
    g = torch.randn(1, 11, generator=gen, dtype=torch.float64)
    agg = build(name)
    out = agg(g)
    factor = {"cagrad": (1 + 0.5) / (1 + 0.5**2), "moco": 0.5}.get(name, 1.0)  # MoCo: Y_1 = β_0 g
    torch.testing.assert_close(out, factor * g[0])


# -- state ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, options",
    [
        ("pcgrad", {}),
        ("moco", {}),
        ("moco", {"base": "pcgrad"}),
        ("moco", {"lambda_map": "softmax", "order": "paper"}),
        ("mean", {}),
        ("mgda", {}),
        ("cagrad", {}),
        ("mgda", {"warm_start": True}),
        ("cagrad", {"warm_start": True}),
    ],
)
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


# -- PCGrad (Yu et al., arXiv 2001.06782, Alg. 1) and EPO-AL, by hand ------------------------


# -- PCGrad -------------------------------------------------------------------------------------
def test_pcgrad_two_task_closed_form(gen):
    for _ in range(30):
        j = sample_jacobian(gen, 2, 7, shared=0.0) * 10 ** torch.empty(1).uniform_(-8, 8, generator=gen).item()
        g1, g2 = j
        g12, g11, g22 = g1 @ g2, g1 @ g1, g2 @ g2
        expected = ((1 - g12 / g11) * g1 + (1 - g12 / g22) * g2) / 2 if g12 < 0 else (g1 + g2) / 2
        torch.testing.assert_close(build("pcgrad")(j), expected, rtol=1e-9, atol=1e-9 * j.abs().max().item())
        torch.testing.assert_close(
            build("pcgrad", reduction="sum")(j), 2 * expected, rtol=1e-9, atol=1e-9 * j.abs().max().item()
        )


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


def test_epo_al_preference_is_made_once_per_device():
    agg = build("epo_al", preference=[0.3, 0.7])
    like = torch.zeros(2)
    assert agg._preference(2, like) is agg._preference(2, like)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_pcgrad_sum_is_k_times_mean(k):
    gen = torch.Generator().manual_seed(10 + k)
    grads = torch.randn(k, 9, generator=gen, dtype=torch.float64)
    grads[1] = -0.8 * grads[0] + 0.3 * grads[1]  # a conflicting pair: projections happen
    d_mean = morl.build("pcgrad", seed=3)(grads)
    d_sum = morl.build("pcgrad", seed=3, reduction="sum")(grads)
    torch.testing.assert_close(d_sum, k * d_mean, rtol=1e-12, atol=1e-12)
    assert float((d_sum - d_mean).norm()) > 0.1 * float(d_mean.norm())
