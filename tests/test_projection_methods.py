"""UPGrad, DualProj, IMTL-G, Aligned-MTL and ConFIG against TorchJD 0.18 (a peer implementation no
one here wrote) and against values worked out by hand.

Conventions mapped (TorchJD takes the Jacobian, forms G = JJᵀ and solves in numpy/torch):

* UPGrad / DualProj: TorchJD solves each QP with quadprog on G/tr(G) + reg_eps·I
  (``QuadprogProjector(norm_eps=1e-4, reg_eps=1e-4)``). morl's ``reg_eps`` adds reg_eps·tr(G)
  to G's diagonal, the same problem up to scale, so ``reg_eps=1e-4`` reproduces TorchJD's
  default; morl's default is 0 (the paper's exact projection). ``norm_eps`` (TorchJD returns
  zeros for G when tr(G) < 1e-4, absolute) is not mapped: morl is scale-free, so TorchJD runs
  with norm_eps = 0 here. Both average with pref 1/K.
* IMTL-G: the same formula G⁺n / 1ᵀG⁺n with the same pinv cutoff (K ε λ_max).
* Aligned-MTL: pref 1/K and scale_mode as TorchJD (TorchJD slices the kept eigenpairs, morl
  masks them).
* ConFIG: TorchJD takes pinv of the K×D unit rows; morl works on the equilibrated Gramian.
"""

import math

import pytest
import torch
import torchjd.aggregation as tj
from torchjd._linalg import QuadprogProjector

from morl.aggregators import build
from morl.aggregators.imtl_g import imtl_g_weights

# (K, D, rank): full rank, rank-deficient, K > D, and K up to 50 (the iterative QP solver)
SHAPES = [(2, 5, 2), (3, 10, 3), (5, 20, 2), (8, 6, 6), (10, 40, 10), (20, 60, 20), (30, 20, 20), (50, 120, 50), (50, 60, 25)]
SEEDS = range(5)


def _jacobian(seed, k, d, rank):
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, rank, generator=gen, dtype=torch.float64) @ torch.randn(rank, d, generator=gen, dtype=torch.float64)
    return j + 0.5 * torch.randn(k, 1, generator=gen, dtype=torch.float64) @ j[:1]  # a shared direction: mixed signs


def _tj_projector():
    return QuadprogProjector(norm_eps=0.0, reg_eps=1e-4)


# name, morl options, TorchJD aggregator, bound on ‖d − d_tj‖ / max‖g‖ and the worst measured
# over SEEDS × SHAPES (float64; 2026-11-25)
TORCHJD = [
    ("upgrad", {"reg_eps": 1e-4}, lambda: tj.UPGrad(projector=_tj_projector()), 2e-10),  # measured 1.9e-11
    ("dualproj", {"reg_eps": 1e-4}, lambda: tj.DualProj(projector=_tj_projector()), 2e-10),  # 2.0e-11
    ("imtl_g", {}, lambda: tj.IMTLG(), 1e-10),  # 5.7e-12
    ("aligned_mtl", {}, lambda: tj.AlignedMTL(), 1e-11),  # 7.9e-14
    ("aligned_mtl", {"scale_mode": "median"}, lambda: tj.AlignedMTL(scale_mode="median"), 5e-10),  # 3.4e-11
    ("aligned_mtl", {"scale_mode": "rmse"}, lambda: tj.AlignedMTL(scale_mode="rmse"), 5e-10),  # 4.9e-11
    ("config", {}, lambda: tj.ConFIG(), 1e-10),  # 1.2e-12
]


@pytest.mark.parametrize("name, options, reference, bound", TORCHJD, ids=[f"{n}-{o}" for n, o, _, _ in TORCHJD])
def test_matches_torchjd(name, options, reference, bound):
    worst = 0.0
    for seed in SEEDS:
        for k, d, rank in SHAPES:
            j = _jacobian(seed, k, d, rank)
            agg = build(name, **options)
            ours, ref = agg(j), reference()(j)
            worst = max(worst, float((ours - ref).norm() / j.norm(dim=1).max()))
            if k > 10:
                assert int(agg.stats.get("not_converged", torch.tensor(0))) == 0
    assert worst <= bound, worst


@pytest.mark.parametrize(
    "name, reference",
    [
        ("upgrad", lambda p: tj.UPGrad(pref_vector=p, projector=_tj_projector())),
        ("dualproj", lambda p: tj.DualProj(pref_vector=p, projector=_tj_projector())),
        ("aligned_mtl", lambda p: tj.AlignedMTL(pref_vector=p)),
        ("config", lambda p: tj.ConFIG(pref_vector=p)),
    ],
)
def test_pref_vector_matches_torchjd(name, reference):
    """Measured over seeds 0..4: ‖d − d_tj‖ / max‖g‖ ≤ 3.4e-12 (UPGrad); bound 5e-11."""
    options = {"reg_eps": 1e-4} if name in ("upgrad", "dualproj") else {}
    for seed in SEEDS:
        j = _jacobian(seed, 6, 15, 6)
        p = torch.tensor([0.5, 1.0, 2.0, 0.1, 1.5, 0.7], dtype=torch.float64)
        ours = build(name, pref_vector=p.tolist(), **options)(j)
        assert (ours - reference(p)(j)).norm() <= 5e-11 * j.norm(dim=1).max()


# -- values worked out by hand on J = [(−4, 1, 1), (6, 1, 1)]: G = [[18, −22], [−22, 38]] -----------
J_BASE = torch.tensor([[-4.0, 1.0, 1.0], [6.0, 1.0, 1.0]], dtype=torch.float64)
R18, R38 = math.sqrt(18.0), math.sqrt(38.0)


def _aligned_weights():
    """B = sqrt(λ_min) G^{-1/2}; for a 2×2 SPD G, G^{1/2} = (G + sqrt(det) I) / sqrt(tr + 2 sqrt(det))."""
    g = J_BASE @ J_BASE.T
    tr, det = 56.0, 200.0
    lam_min = (tr - math.sqrt(tr * tr - 4 * det)) / 2
    root = (g + math.sqrt(det) * torch.eye(2, dtype=torch.float64)) / math.sqrt(tr + 2 * math.sqrt(det))
    return math.sqrt(lam_min) * torch.linalg.inv(root) @ torch.full((2,), 0.5, dtype=torch.float64)


HAND = {
    # π(g1) = g1 + (22/38) g2, π(g2) = g2 + (22/18) g1 (each conflicts only with the other);
    # d = ½(π1 + π2): weights (10/9, 15/19), d = (50/171, 325/171, 325/171)
    "upgrad": torch.tensor([10 / 9, 15 / 19], dtype=torch.float64),
    # mean (1, 1, 1) conflicts with g1 only (g1·m = −2): m + (2/18) g1, weights (1/2 + 1/9, 1/2)
    "dualproj": torch.tensor([11 / 18, 1 / 2], dtype=torch.float64),
    # G⁻¹n ∝ (38√18 + 22√38, 22√18 + 18√38), normalised to sum 1
    "imtl_g": torch.tensor([19 * R18 + 11 * R38, 11 * R18 + 9 * R38], dtype=torch.float64) / (30 * R18 + 20 * R38),
    "aligned_mtl": _aligned_weights(),
    # the unit rows have equal projections on u = (u1 + u2)/‖u1 + u2‖; Σ g_i·u u = ½(√18 + √38)(u1 + u2)
    "config": 0.5 * (R18 + R38) * torch.tensor([1 / R18, 1 / R38], dtype=torch.float64),
}
# TorchJD's own test values for this J (tests/unit/aggregation/test_values.py, rounded to 1e-4),
# which use reg_eps = 1e-4 for UPGrad / DualProj
TORCHJD_VALUES = {
    "upgrad": [0.2929, 1.9004, 1.9004], "dualproj": [0.5563, 1.1109, 1.1109], "imtl_g": [0.0767, 1.0, 1.0],
    "aligned_mtl": [0.2133, 0.9673, 0.9673], "config": [0.1588, 2.0706, 2.0706],
}


@pytest.mark.parametrize("name", sorted(HAND))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hand_computed_values(name, dtype):
    agg = build(name)
    d = agg(J_BASE.to(dtype)).double()
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(agg.weights.double(), HAND[name], rtol=0, atol=tol * 10)
    torch.testing.assert_close(d, HAND[name] @ J_BASE, rtol=0, atol=tol * 10)
    torch.testing.assert_close(d, torch.tensor(TORCHJD_VALUES[name], dtype=torch.float64), rtol=0, atol=1.2e-3)


def test_torchjd_values_with_its_regularisation():
    for name in ("upgrad", "dualproj"):
        d = build(name, reg_eps=1e-4)(J_BASE)
        torch.testing.assert_close(d, torch.tensor(TORCHJD_VALUES[name], dtype=torch.float64), rtol=0, atol=1e-4)


# -- K = 1, zero rows ---------------------------------------------------------------------------------
NAMES = ["upgrad", "dualproj", "imtl_g", "aligned_mtl", "config"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_objective_returns_its_gradient(name, dtype):
    g = torch.tensor([[3.0, -1.0, 2.0, 0.5]], dtype=dtype)
    torch.testing.assert_close(build(name)(g), g[0])
    torch.testing.assert_close(build(name)(torch.zeros_like(g)), torch.zeros_like(g[0]))


# With a zero row added to J = [g1, g2]: UPGrad, DualProj and Aligned-MTL keep the same cone /
# components but average over K = 3 (d₃ = (2/3) d₂); IMTL-G and ConFIG ignore the row (d₃ = d₂).
ZERO_ROW_FACTOR = {"upgrad": 2 / 3, "dualproj": 2 / 3, "aligned_mtl": 2 / 3, "imtl_g": 1.0, "config": 1.0}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zero_rows(name, dtype):
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    for seed in SEEDS:
        j2 = _jacobian(seed, 2, 7, 2).to(dtype)
        j3 = torch.stack([j2[0], torch.zeros_like(j2[0]), j2[1]])
        d2, d3 = build(name)(j2).double(), build(name)(j3).double()
        assert (d3 - ZERO_ROW_FACTOR[name] * d2).norm() <= tol * j2.double().norm(dim=1).max()
        assert torch.equal(build(name)(torch.zeros(4, 7, dtype=dtype)), torch.zeros(7, dtype=dtype))


def test_upgrad_is_not_zero_at_a_weakly_stationary_point():
    """g1 = −g2 and g3 ⟂ both: (1, 1, 0) combines the rows to 0 (Pareto stationary; MGDA
    returns 0), but no strictly positive combination does. The dual cone is {x1 = 0, x2 ≥ 0},
    π(g1) = π(g2) = 0 and π(g3) = g3, so UPGrad returns g3/3 and DualProj π(g3/3) = g3/3."""
    j = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    expected = torch.tensor([0.0, 1 / 3], dtype=torch.float64)
    torch.testing.assert_close(build("upgrad")(j), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(build("dualproj")(j), expected, rtol=0, atol=1e-12)
    assert build("mgda")(j).norm() <= 1e-12


@pytest.mark.parametrize(
    "name, options, match",
    [
        ("upgrad", {"pref_vector": [1.0, -1.0]}, "pref_vector"),
        ("upgrad", {"reg_eps": -1.0}, "reg_eps"),
        ("dualproj", {"max_iter": 0}, "max_iter"),
        ("aligned_mtl", {"scale_mode": "max"}, "scale_mode"),
        ("config", {"pref_vector": [0.0, 0.0]}, "pref_vector"),
    ],
)
def test_invalid_options_name_the_option(name, options, match):
    with pytest.raises(ValueError, match=match):
        build(name, **options)


def test_pref_vector_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="pref_vector has 2 entries but got K=3"):
        build("upgrad", pref_vector=[1.0, 2.0])(torch.ones(3, 4))


# -- each method's defining property, on seeded matrices ------------------------------------------------
def test_imtl_g_projections_on_the_unit_gradients_are_equal():
    """IMTL-G's defining condition d·g_k/‖g_k‖ = const with Σα = 1 (full row rank, K ≤ D)."""
    for seed in SEEDS:
        for k, d in ((2, 5), (4, 9), (7, 7)):
            j = _jacobian(seed, k, d, k)
            agg = build("imtl_g")
            proj = (j @ agg(j)) / j.norm(dim=1)
            assert float(proj.max() - proj.min()) <= 1e-10 * float(j.norm(dim=1).max())
            assert abs(float(agg.weights.sum()) - 1.0) <= 1e-12


def test_imtl_g_can_conflict_with_every_objective():
    """1ᵀG⁻¹n < 0 makes the common projection negative: −d raises every loss. Why imtl_g has
    no non_conflicting flag (the paper claims none)."""
    j = torch.tensor([[1.40, 0.26, -0.58], [0.75, 2.66, 0.78], [0.76, 1.71, 0.48]], dtype=torch.float64)
    proj = (j @ build("imtl_g")(j)) / j.norm(dim=1)
    torch.testing.assert_close(proj, torch.full((3,), float(proj[0]), dtype=torch.float64), rtol=1e-10, atol=0)
    assert float(proj[0]) < -0.38


def _degenerate_imtl_g_rows(rho_low=0.6, rho_high=0.65) -> torch.Tensor:
    """Three rows in the plane, g_1 = (1, 0), g_2 at angle 2.5, g_3 = ρ at angle 4.5, with ρ
    bisected (float64, 80 halvings) to the root of 1ᵀG⁺n, where IMTL-G's normalisation has
    nothing to divide by (the sum changes sign between ρ = 0.6 and 0.65)."""

    def rows(rho):
        angles = torch.tensor([0.0, 2.5, 4.5], dtype=torch.float64)
        radii = torch.tensor([1.0, 1.0, rho], dtype=torch.float64)
        return torch.stack([radii * angles.cos(), radii * angles.sin()], dim=1)

    def total(rho):
        g = rows(rho) @ rows(rho).T
        return float((torch.linalg.pinv(g, hermitian=True) @ g.diagonal().sqrt()).sum())

    assert total(rho_low) > 0 > total(rho_high)
    for _ in range(80):
        mid = 0.5 * (rho_low + rho_high)
        rho_low, rho_high = (mid, rho_high) if total(mid) > 0 else (rho_low, mid)
    return rows(rho_low)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_imtl_g_without_a_normalisation_gives_no_step(dtype):
    """Σ_k (G⁺n)_k = 0 up to rounding leaves α = G⁺n / 1ᵀG⁺n undefined, even in sign: IMTL-G
    returns weights 0 and d = 0 (TorchJD: the same in float64, by an absolute 1e-12 guard),
    not Σ g_k (the rows here do not cancel: ‖Σ g_k‖ ≈ 0.069). The guard is relative: 1e-12
    of Σ|G⁺n| in float64, K ε₃₂ in float32, where this sum computes as 2.4e-8 of Σ|G⁺n| and
    the weights would otherwise come out near 1e7."""
    j = _degenerate_imtl_g_rows()
    assert float(j.sum(0).norm()) > 0.06
    agg = build("imtl_g")
    d = agg(j.to(dtype))
    torch.testing.assert_close(agg.weights, torch.zeros(3, dtype=dtype), rtol=0, atol=0)
    torch.testing.assert_close(d, torch.zeros(2, dtype=dtype), rtol=0, atol=0)
    if dtype == torch.float64:
        torch.testing.assert_close(tj.IMTLG()(j), torch.zeros(2, dtype=dtype), rtol=0, atol=0)
    batched = imtl_g_weights(torch.stack([j @ j.T] * 2).to(dtype))  # the torch path
    torch.testing.assert_close(batched, torch.zeros(2, 3, dtype=torch.float64), rtol=0, atol=0)


def test_config_is_conflict_free_for_independent_rows_only():
    """Independent rows: every unit gradient has the same positive projection on d (the
    paper's claim). K > D: U⁺1 is a least-squares inverse and d conflicts with rows 2 and 3."""
    for seed in SEEDS:
        j = _jacobian(seed, 5, 12, 5)
        proj = (j @ build("config")(j)) / j.norm(dim=1)
        assert float(proj.min()) > 0 and float(proj.max() - proj.min()) <= 1e-10 * float(j.norm(dim=1).max())
    j = torch.tensor([[-0.90, -0.56], [0.69, 0.22], [-0.67, 0.68], [0.57, -0.58]], dtype=torch.float64)
    proj = (j @ build("config")(j)) / j.norm(dim=1)
    assert float(proj[1]) < -0.03 and float(proj[2]) < -0.15


def test_aligned_mtl_balances_the_singular_values():
    """Alg. 1's purpose: BJ has all singular values √λ_min, i.e. B G B = λ_min·P (P the
    projector on the kept eigenvectors; I for full rank)."""
    from morl.aggregators.aligned_mtl import balance_transformation

    for seed in SEEDS:
        for k, d, rank in ((3, 8, 3), (6, 20, 6), (6, 20, 3)):
            j = _jacobian(seed, k, d, rank)
            g = j @ j.T
            lam, vec = torch.linalg.eigh(g)
            kept = vec[:, lam > lam[-1] * k * torch.finfo(torch.float64).eps]
            b = balance_transformation(g)
            expected = float(lam[lam > lam[-1] * k * torch.finfo(torch.float64).eps].min()) * kept @ kept.T
            torch.testing.assert_close(b @ g @ b, expected, rtol=0, atol=1e-9 * float(lam[-1]))


def test_aligned_mtl_weights_without_b_are_b_times_the_preference():
    """balanced_weights (V (c ⊙ Vᵀw), no K×K×K product) is B w from balance_transformation, for
    full-rank, rank-deficient, batched and all-zero Gramians (B = I there), every scale mode
    and a non-uniform preference."""
    from morl.aggregators.aligned_mtl import SCALE_MODES, balance_transformation, balanced_weights

    for seed in SEEDS:
        grams = torch.stack([(j := _jacobian(seed, 6, 20, rank)) @ j.T for rank in (6, 3, 1)] + [torch.zeros(6, 6, dtype=torch.float64)])
        pref = torch.rand(6, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.1
        for mode in SCALE_MODES:
            expected = (balance_transformation(grams, mode) @ pref.unsqueeze(-1)).squeeze(-1)
            torch.testing.assert_close(balanced_weights(grams, pref, mode), expected, rtol=1e-12, atol=1e-12 * float(expected.abs().max()))
            torch.testing.assert_close(balanced_weights(grams[1], pref, mode), expected[1], rtol=1e-12, atol=1e-12 * float(expected.abs().max()))
        torch.testing.assert_close(balanced_weights(grams[3], pref), pref, rtol=0, atol=0)
        min_mode = (balance_transformation(grams[0], "min") @ pref.unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(balanced_weights(grams[0], pref), min_mode, rtol=1e-12, atol=0)  # the paper's default


def test_imtl_g_guards_each_member_of_a_batch_on_its_own():
    """The degenerate-sum guard compares each Gramian's Σ(G⁺n) with its own Σ|G⁺n|: a regular
    member at scale 1e30 (its G⁺n ~1e-15) next to the degenerate one keeps its weights."""
    deg = _degenerate_imtl_g_rows()
    regular = torch.tensor([[1.0, 0.2], [0.3, 1.0], [-0.5, 0.8]], dtype=torch.float64)
    grams = torch.stack([deg @ deg.T, 1e30 * (regular @ regular.T)])
    out = imtl_g_weights(grams)
    torch.testing.assert_close(out[0], torch.zeros(3, dtype=torch.float64), rtol=0, atol=0)
    torch.testing.assert_close(out[1], imtl_g_weights(regular @ regular.T), rtol=1e-10, atol=0)
    assert out[1].abs().sum() > 0.5
