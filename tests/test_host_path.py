"""The Python-float path of small CPU Gramians (morl/aggregators/_host.py) against each method's
torch path, which the property suite and the TorchJD comparisons check independently
(UPGrad/DualProj: their QPs as lists, morl.solvers.dual_cone.project_rows_host, against the
tensor route; the solvers themselves are checked against quadprog in test_dual_cone.py).

The same [K, D] inputs go through one aggregator as is (K ≤ 16 on the CPU: the Python path)
and through one whose module sees no host Gramian (``gramian_rows`` patched to None: the
torch path that other devices, batched and autograd inputs take). Inputs: full rank and rank
deficient, a zero row, rows whose norms differ by 1e6, K = 2..16, float32 and float64.
Measured over these cases (max |Δw| / max |w|): identical in float32, up to 2.3e-15 in
float64 (IMTL-G at K = 3: the Python sums run in another order than pinv's products);
bound 1e-12. IMTL-G's Python path inverts a full-rank Gramian by Cholesky, which is exact where
pinv is not (rows whose norms differ by 1e6: pinv is 1.3e-5 off in float64): there the
reference is exact rational arithmetic (to the dtype's rounding).
"""

import importlib
import math
import random
from fractions import Fraction

import pytest
import torch

from morl.aggregators import _host, build
from morl.aggregators.imtl_g import _inverse_rows
from morl.host_reads import cpu_tensor
from morl.solvers.gramian import gramian_and_top

CASES = {
    "imtl_g": [{}],
    "aligned_mtl": [{"scale_mode": "min"}, {"scale_mode": "median"}, {"scale_mode": "rmse"}],
    "krum": [{}, {"score": "distance"}, {"n_byzantine": 1, "m": 2}],
    "mgda": [{}],
    "pcgrad": [{}, {"reduction": "sum"}],
    "gradvac": [{"beta": 0.5}, {"beta": 0.5, "reduction": "sum"}],
    "upgrad": [{}, {"reg_eps": 1e-4}],
    "dualproj": [{}, {"reg_eps": 1e-4}],
}
PARAMS = [(name, opts) for name, variants in CASES.items() for opts in variants]


def _inputs(k: int, dtype: torch.dtype) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(k)
    full = torch.randn(k, 30, generator=gen, dtype=dtype)
    low = torch.randn(k, max(1, k // 2), generator=gen, dtype=dtype) @ torch.randn(max(1, k // 2), 30, generator=gen, dtype=dtype)
    zero = full.clone()
    zero[k // 2] = 0
    scaled = full * torch.logspace(0, 6, k, dtype=dtype).unsqueeze(1)
    return [full, low, zero, scaled]


def _torch_path(name: str, opts: dict, grads: torch.Tensor, monkeypatch) -> torch.Tensor:
    agg = build(name, **opts)
    module = importlib.import_module(type(agg).__module__)
    with monkeypatch.context() as patch:
        patch.setattr(module, "gramian_rows", lambda gram: None)
        agg(grads)
    return agg.weights


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name, opts", PARAMS, ids=[f"{n}-{o}" for n, o in PARAMS])
def test_python_path_matches_the_torch_path(name, opts, dtype, monkeypatch):
    ks = [2] if name in ("mgda", "pcgrad", "gradvac") else [2, 3, 5, 10, 16]  # K = 2 closed forms
    for k in ks:
        if name == "krum" and k < 2 * opts.get("n_byzantine", 0) + 3:
            continue
        for grads in _inputs(k, dtype):
            agg = build(name, **opts)
            agg(grads)
            expected = _torch_path(name, opts, grads, monkeypatch)
            assert agg.weights.dtype == expected.dtype == dtype
            tol = 1e-12
            exact = _imtl_g_exact_if_inverted(grads) if name == "imtl_g" else None
            if exact is not None:  # the Cholesky route: exact where pinv is not (see its test)
                expected, tol = exact.to(dtype), max(tol, torch.finfo(dtype).eps)
            scale = float(expected.abs().max().clamp_min(1e-30))
            assert float((agg.weights - expected).abs().max()) <= tol * scale, (k, agg.weights, expected)


def _imtl_g_exact_if_inverted(grads: torch.Tensor) -> torch.Tensor | None:
    """IMTL-G's G⁻¹n / 1ᵀG⁻¹n in exact rational arithmetic on the Gramian the aggregator forms
    (G / max G_kk), when the Python path takes the Cholesky route for it; else None."""
    gram, top = gramian_and_top(grads)
    gram = gram / top
    if grads.shape[0] <= 2 or _inverse_rows(gram, gram.tolist()) is None:
        return None
    return torch.tensor(_exact_imtl_g(gram.double().tolist()), dtype=torch.float64)


def _exact_imtl_g(rows: list[list[float]]) -> list[float]:
    """v = G⁻¹n by Gaussian elimination in Fractions (n_k = sqrt(G_kk), itself rounded: the
    reference solves for the same right-hand side), normalised to sum 1."""
    k = len(rows)
    m = [[Fraction(x) for x in row] + [Fraction(math.sqrt(rows[i][i]))] for i, row in enumerate(rows)]
    for col in range(k):
        piv = next(r for r in range(col, k) if m[r][col] != 0)
        m[col], m[piv] = m[piv], m[col]
        for r in range(k):
            if r != col and m[r][col] != 0:
                f = m[r][col] / m[col][col]
                m[r] = [a - f * b for a, b in zip(m[r], m[col])]
    v = [m[i][k] / m[i][i] for i in range(k)]
    total = sum(v)
    return [float(x / total) for x in v]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_imtl_g_inverts_only_where_pinv_keeps_every_eigenvalue(dtype):
    """The Cholesky route (K ≥ 3) answers only when tr G · tr G⁻¹ < 1/(2K ε): it declines the
    rank-deficient inputs and a Gramian whose smallest eigenvalue pinv cuts (λ = K ε / 2 of
    λ_max) or keeps by less than the certificate's margin (2 K ε); where it answers it is exact in
    rational arithmetic, also with row norms spread by 1e6, where pinv (the torch path) is
    off by up to 1.3e-5 in float64. Measured over K = 3..16, seeds 0..19: max |Δw| / max |w|
    = 1.2e-14 in float64, 5.3e-8 in float32 (its rounding); bounds 1e-13 and ε."""
    eps = torch.finfo(dtype).eps
    for k in (3, 5, 10, 16):
        full, low, zero, scaled = _inputs(k, dtype)
        for grads in (low,):
            gram = grads @ grads.T
            assert _inverse_rows(gram, gram.tolist()) is None
        q, _ = torch.linalg.qr(torch.randn(k, k, generator=torch.Generator().manual_seed(k), dtype=torch.float64))
        for small in (k * eps / 2, 2 * k * eps):  # cut by pinv; kept, but by less than the margin
            lam = torch.ones(k, dtype=torch.float64)
            lam[0] = small
            gram = ((q * lam) @ q.T).to(dtype)
            assert _inverse_rows(gram, gram.tolist()) is None
        for seed in range(20):
            gen = torch.Generator().manual_seed(seed)
            for spread in (1.0, 1e6) if dtype == torch.float64 else (1.0,):  # float32: pinv cuts 1e-12
                grads = torch.randn(k, 40, generator=gen, dtype=torch.float64) * torch.logspace(0, math.log10(spread), k, dtype=torch.float64).unsqueeze(1)
                gram = grads @ grads.T
                gram = (gram / gram.diagonal().max()).to(dtype)
                rows = gram.tolist()
                assert _inverse_rows(gram, rows) is not None
                w = build("imtl_g").weights_from_gramian(gram).double()
                exact = torch.tensor(_exact_imtl_g(gram.double().tolist()), dtype=torch.float64)
                assert float((w - exact).abs().max()) <= max(1e-13, eps) * float(exact.abs().max())


def _imtl_g_solved(gram: torch.Tensor) -> torch.Tensor:
    """IMTL-G's G⁻¹n / 1ᵀG⁻¹n by LU (torch.linalg.solve, another factorisation than the
    route's Cholesky) in float64, n_k = sqrt(G_kk)."""
    g = gram.double()
    v = torch.linalg.solve(g, g.diagonal().sqrt())
    return v / v.sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_imtl_g_inverts_larger_cpu_gramians_where_pinv_keeps_every_eigenvalue(dtype, monkeypatch):
    """K > 16 on the CPU (the Python path's lists would cost K² reads): the same certificate
    as the Python path's Cholesky route, now from ‖L⁻¹‖_F². Where it answers (full rank, row
    norms equal or, in float64, spread over 1e4) the weights are the LU solution's: measured over
    K = 17, 20, 50, 100 and seeds 0..9, max |Δw| / max |w| ≤ 5.6e-14 in float64 and 4.9e-8 in
    float32 (its rounding of w); bounds 1e-12 and ε. Where it
    declines (rank K/2, an eigenvalue pinv cuts or keeps by less than the margin, NaN, a batch,
    a device where reads cost a sync) the pinv route answers, as before."""
    from morl.aggregators import imtl_g

    eps = torch.finfo(dtype).eps
    agg = build("imtl_g")
    taken = []
    real = imtl_g._imtl_g_inverted
    monkeypatch.setattr(imtl_g, "_imtl_g_inverted", lambda g: taken.append(real(g) is not None) or real(g))
    for k in (17, 50):
        for seed in range(2):
            gen = torch.Generator().manual_seed(seed)
            for spread in (1.0,) if dtype == torch.float32 else (1.0, 1e4):  # float32: 1e2 is declined at K = 50
                grads = torch.randn(k, 3 * k, generator=gen, dtype=torch.float64) * torch.logspace(0, math.log10(spread), k, dtype=torch.float64).unsqueeze(1)
                gram = grads @ grads.T
                gram = (gram / gram.diagonal().max()).to(dtype)
                taken.clear()
                w = agg.weights_from_gramian(gram).double()
                assert taken == [True], (k, seed, spread)
                expected = _imtl_g_solved(gram)
                assert float((w - expected).abs().max()) <= max(1e-12, eps) * float(expected.abs().max()), (k, seed, spread)
        q, _ = torch.linalg.qr(torch.randn(k, k, generator=torch.Generator().manual_seed(k), dtype=torch.float64))
        low = torch.randn(k, k // 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        declined = [(low @ low.T).to(dtype)]
        for small in (k * eps / 2, 2 * k * eps):
            lam = torch.ones(k, dtype=torch.float64)
            lam[0] = small
            declined.append(((q * lam) @ q.T).to(dtype))
        nan = torch.eye(k, dtype=dtype)
        nan[0, 1] = nan[1, 0] = float("nan")
        for gram in [*declined, nan]:
            assert imtl_g._imtl_g_inverted(gram) is None
        for gram in declined:
            torch.testing.assert_close(agg.weights_from_gramian(gram), imtl_g.imtl_g_weights(gram).to(dtype), rtol=0, atol=0)
        full = torch.eye(k, dtype=dtype) + 0.1
        assert imtl_g._imtl_g_inverted(torch.stack([full, full])) is None
        assert imtl_g._imtl_g_inverted(full) is not None
        with monkeypatch.context() as patch:
            patch.setattr(_host, "reads_are_free", lambda t: False)
            assert imtl_g._imtl_g_inverted(full) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_aligned_mtl_on_larger_cpu_gramians_matches_the_torch_path(dtype, monkeypatch):
    """K > 16 on the CPU: the eigenvalues read as floats and V (c ⊙ Vᵀw) as two products
    (aligned_mtl._aligned_cpu) against the torch path (balanced_weights) on the same Gramians:
    full rank, rank K/2, a zero row, row norms spread over 1e6 (in float32 most eigenvalues are
    then cut), every scale mode, the default and a given preference. Measured over K = 17, 20,
    50, 100 and seeds 0..9: identical in float32, ≤ 1.0e-15 of max |w| in float64; bound 1e-12.
    A batch, NaN, or a device where reads cost a sync: the torch path answers (None here)."""
    from morl.aggregators import aligned_mtl

    taken = []
    real = aligned_mtl._aligned_cpu
    monkeypatch.setattr(aligned_mtl, "_aligned_cpu", lambda *a: taken.append(1) or real(*a))
    for k in (17, 50):
        for grads in _inputs(k, torch.float64):
            gram, top = gramian_and_top(grads)
            gram = (gram / top).to(dtype)
            for opts in ({"scale_mode": "min"}, {"scale_mode": "median"}, {"scale_mode": "rmse"},
                         {"pref_vector": [float(i + 1) for i in range(k)]}):
                agg = build("aligned_mtl", **opts)
                taken.clear()
                w = agg.weights_from_gramian(gram)
                pref = agg._preference(k, gram, None)
                expected = aligned_mtl.balanced_weights(gram, pref, agg.scale_mode).to(dtype)
                assert taken == [1] and w.dtype == dtype
                assert float((w - expected).abs().max()) <= 1e-12 * float(expected.abs().max()), (k, opts)
    full = torch.eye(17, dtype=dtype) + 0.1
    nan = full.clone()
    nan[0, 1] = nan[1, 0] = float("nan")
    assert real(full, [1 / 17] * 17, "min") is not None and _host.one_free_gramian(full)
    assert not _host.one_free_gramian(torch.stack([full, full]))
    assert not _host.one_free_gramian(full.clone().requires_grad_())
    assert real(nan, [1 / 17] * 17, "min") is None
    assert torch.equal(real(torch.zeros(17, 17, dtype=dtype), [0.5] * 17, "min"), torch.full((17,), 0.5, dtype=torch.float64))
    with monkeypatch.context() as patch:
        patch.setattr(_host, "reads_are_free", lambda t: False)
        taken.clear()
        assert not _host.one_free_gramian(full)
        assert build("aligned_mtl").weights_from_gramian(full).dtype == dtype and taken == []  # the torch path's


@pytest.mark.parametrize("k", [3, 17])
def test_aligned_mtl_with_a_preference_reads_nothing_off_the_cpu(k):
    """A given preference vector on ``meta`` tensors (no data: any read fails; the CPU proxy for
    a device where a read is a sync): the torch path, without reading the preference first."""
    agg = build("aligned_mtl", pref_vector=[float(i + 1) for i in range(k)], check_finite="off")
    out = agg(torch.empty(k, 10, device="meta"))
    assert out.device.type == "meta" and out.shape == (10,)


def test_python_path_is_taken_only_where_reading_is_free():
    """Lists only for one finite K ≤ 16 CPU Gramian without autograd."""
    g = torch.eye(3)
    assert _host.gramian_rows(g) == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert _host.gramian_rows(torch.eye(_host.HOST_MAX_K)) is not None
    assert _host.gramian_rows(torch.eye(_host.HOST_MAX_K + 1)) is None
    assert _host.gramian_rows(torch.stack([g, g])) is None
    assert _host.gramian_rows(g.clone().requires_grad_()) is None
    bad = g.clone()
    bad[0, 1] = float("nan")
    assert _host.gramian_rows(bad) is None
    bad[0, 1] = float("inf")
    assert _host.gramian_rows(bad) is None
    assert _host.gramian_rows(torch.eye(3, device="meta")) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradvac_state_and_draws_follow_the_torch_path(dtype, monkeypatch):
    """GradVac at K = 2 over several calls: the same weights, the same EMA targets, and the
    same generator state afterwards (its Python path draws no orders: randperm(1) takes
    nothing from a CPU generator), so every later draw is the same too."""
    import morl.aggregators.gradvac as gradvac

    gen = torch.Generator().manual_seed(3)
    seq = [torch.randn(2, 30, generator=gen, dtype=dtype) for _ in range(4)]
    seq[2][1] = -seq[2][0]  # opposite rows: phi = -1
    seq[3][0] = 0  # a zero row: the cosine counts as 0
    host, ref = build("gradvac", beta=0.3), build("gradvac", beta=0.3)
    for grads in seq:
        host(grads)
        with monkeypatch.context() as patch:
            patch.setattr(gradvac, "gramian_rows", lambda gram: None)
            ref(grads)
        torch.testing.assert_close(host.weights, ref.weights, rtol=1e-12, atol=0)
        torch.testing.assert_close(host.targets, ref.targets, rtol=1e-12, atol=1e-300)
    assert torch.equal(host._generator_for(torch.device("cpu")).get_state(), ref._generator_for(torch.device("cpu")).get_state())


def _random_2x2(rng: random.Random, kind: int) -> tuple[float, float, float]:
    """A 2×2 Gramian [[a, b], [b, c]] of two rows in R³: independent, nearly colinear (angle
    1e-8..1), norms 1e-6..1e6 apart, or exactly (anti)colinear."""
    x = [rng.gauss(0, 1) for _ in range(3)]
    y = [rng.gauss(0, 1) for _ in range(3)]
    if kind == 1:
        y = [xi + yi * 10 ** rng.uniform(-8, 0) for xi, yi in zip(x, y)]
    elif kind == 2:
        y = [yi * 10 ** rng.uniform(-6, 6) for yi in y]
    elif kind == 3:
        y = [rng.choice((-2.0, 0.5, 3.0)) * xi for xi in x]
    return sum(v * v for v in x), sum(p * q for p, q in zip(x, y)), sum(v * v for v in y)


def test_the_closed_form_2x2_eigendecomposition_is_lapacks():
    """K = 2 eigenpairs in Python floats (_host.eigh_2x2) against LAPACK's (torch.linalg.eigh)
    and, for the smaller eigenvalue, against exact rational arithmetic: det/λ_max with the
    determinant of the float entries taken in Fractions (LAPACK is accurate to ε λ_max only,
    which hides a nearly singular G's λ_min). 4000 matrices of four kinds. Measured over seeds
    0-9 (40000 matrices): eigenvalues within 3.5e-16 λ_max of LAPACK's, residuals ‖Gv − λv‖ and
    |‖v‖ − 1| ≤ 3.8e-16; λ_min within 2 ulps of the rational value; bounds 2e-15 and 8 ulps."""
    rng = random.Random(2)
    for i in range(4000):
        a, b, c = _random_2x2(rng, i % 4)
        lam, vecs = _host.eigh_2x2(a, b, c)
        g = torch.tensor([[a, b], [b, c]], dtype=torch.float64)
        ref = torch.linalg.eigh(g).eigenvalues
        top = float(ref.abs().max())
        assert lam[0] <= lam[1]
        assert max(abs(lam[j] - float(ref[j])) for j in range(2)) <= 2e-15 * top, (a, b, c, lam, ref)
        for j in range(2):
            v = torch.tensor(vecs[j], dtype=torch.float64)
            assert float((g @ v - lam[j] * v).norm()) <= 2e-15 * top
            assert abs(float(v.norm()) - 1.0) <= 2e-15
        exact_det = Fraction(a) * Fraction(c) - Fraction(b) ** 2
        small = float(exact_det / Fraction(lam[1]))
        assert abs(lam[0] - small) <= 8 * math.ulp(small) + 1e-300, (a, b, c, lam[0], small)


def test_the_closed_form_2x2_handles_multiples_of_the_identity_and_zero():
    """r = 0 (a = c, b = 0): both eigenvalues a, any orthonormal basis; zero and rank-1 rows:
    λ_min exactly 0 where the determinant of the entries is exactly 0."""
    assert _host.eigh_2x2(0.0, 0.0, 0.0) == ([0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]])
    assert _host.eigh_2x2(3.0, 0.0, 3.0) == ([3.0, 3.0], [[1.0, 0.0], [0.0, 1.0]])
    lam, vecs = _host.eigh_2x2(1.0, 2.0, 4.0)  # rows x and 2x, |x| = 1
    assert lam == [0.0, 5.0]
    assert abs(vecs[1][0] * 2.0 - vecs[1][1]) <= 1e-15 and abs(vecs[0][0] + 2.0 * vecs[0][1]) <= 1e-15
    lam, _ = _host.eigh_2x2(2.0, 0.0, 1.0)  # diagonal, a > c: λ ascending
    assert lam == [1.0, 2.0]


def test_the_two_product_is_exact():
    """Dekker's two-product: x·y == prod + err exactly, in rational arithmetic, for 20000 pairs
    with magnitudes 2^-60..1 (the determinant's products, entries scaled to ≤ 1)."""
    rng = random.Random(5)
    for _ in range(20000):
        x = rng.uniform(-1, 1) * 2.0 ** -rng.randint(0, 60)
        y = rng.uniform(-1, 1) * 2.0 ** -rng.randint(0, 60)
        prod, err = _host._two_product(x, y)
        assert prod == x * y
        assert Fraction(x) * Fraction(y) == Fraction(prod) + Fraction(err), (x, y)


@pytest.mark.parametrize("exponent", [-900, -300, 0, 300, 900])
def test_the_closed_form_2x2_is_exact_under_power_of_two_scaling(exponent):
    """Scaled by 2^e (exact), the eigenvalues scale by 2^e exactly and the vectors do not move,
    from Gramians near underflow to near overflow: the entries are rescaled inside, so no product
    over- or underflows (a = c = 2^900 · 1e12 would make a·c = inf without that)."""
    rng = random.Random(exponent)
    s = 2.0**exponent
    for i in range(400):
        a, b, c = _random_2x2(rng, i % 4)
        lam, vecs = _host.eigh_2x2(a, b, c)
        lam_s, vecs_s = _host.eigh_2x2(a * s, b * s, c * s)
        assert lam_s == [x * s for x in lam] and vecs_s == vecs, (a, b, c)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_small_values_round_and_convert_as_torch_tensor_does(dtype):
    """``rounded`` and ``weights_tensor`` (C arrays for float32/64, torch.tensor otherwise) give
    exactly ``torch.tensor(values, dtype=...)``'s values and dtype, on random numbers of every
    magnitude, NaN and out-of-range ones included (rounded to ±inf, as torch does); so does
    ``cpu_tensor`` for no values and for bools."""
    gen = random.Random(0)
    values = [gen.uniform(-1, 1) * 10.0 ** gen.randint(-40, 40) for _ in range(200)] + [math.nan, 1e300, -1e300, 0.0]
    expected = torch.tensor(values, dtype=dtype)
    got = _host.weights_tensor(values, torch.zeros(1, dtype=torch.float64), dtype)
    assert got.dtype == dtype and got.shape == expected.shape
    assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got[~got.isnan()], expected[~expected.isnan()])
    assert _host.weights_tensor(values[:3], torch.zeros(1, dtype=dtype)).dtype == dtype
    for x in values[:50] + [1.0 / 3, 0.1]:
        assert _host.rounded(x, dtype) == torch.tensor(x, dtype=dtype).item()
    assert cpu_tensor([], dtype).shape == (0,) and cpu_tensor([], dtype).dtype == dtype
    flags = [gen.random() < 0.5 for _ in range(37)]
    assert torch.equal(cpu_tensor(iter(flags), torch.bool), torch.tensor(flags))  # any iterable, as the QP rounds pass
