"""IMTL-G, Aligned-MTL and ConFIG beyond one CPU call: the torch path that runs batched, on other
devices, under ``torch.compile`` and for K > 16, and ``weights_from_gramian`` called directly
with a Gramian at any scale (users who all-reduce G across workers).

The references are the one-matrix host path (Python floats from one ``eigh``, its own code) and
the float64 answer. Mutation testing (docs/testing.md) found these paths unpinned: the tests of
tests/test_projection_methods.py go through one 2-D CPU Gramian, which takes the host path.
"""

import pytest
import torch

from morl.aggregators import build
from morl.aggregators.aligned_mtl import SCALE_MODES, balance_transformation
from morl.aggregators.config import config_weights
from morl.aggregators.imtl_g import imtl_g_weights

K = 5


def _gram(seed: int, k: int, rank: int) -> torch.Tensor:
    """float64 Gramian of a [k, 3k] Jacobian of the given rank, rows of mixed signs."""
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, rank, generator=gen, dtype=torch.float64) @ torch.randn(rank, 3 * k, generator=gen, dtype=torch.float64)
    j = j + 0.5 * torch.randn(k, 1, generator=gen, dtype=torch.float64) @ j[:1]
    return j @ j.T


def _torch_path(name: str, options: dict):
    """(batched weights function, aggregator) of one method."""
    if name == "imtl_g":
        return imtl_g_weights, build(name)
    if name == "config":
        return (lambda g: config_weights(g, torch.ones(g.shape[-1], dtype=torch.float64))), build(name)
    mode = options["scale_mode"]
    pref = torch.full((K,), 1.0 / K, dtype=torch.float64)
    return (lambda g: (balance_transformation(g, mode) @ pref.unsqueeze(-1)).squeeze(-1)), build(name, **options)


METHODS = [("imtl_g", {}), ("config", {})] + [("aligned_mtl", {"scale_mode": m}) for m in SCALE_MODES]
IDS = [f"{n}-{o.get('scale_mode', '')}" for n, o in METHODS]
# what a zero (or non-finite) Gramian gives: no direction, except Aligned-MTL's B = I (the preference)
AT_ZERO = {n: torch.full((K,), 1.0 / K if n == "aligned_mtl" else 0.0, dtype=torch.float64) for n in ("imtl_g", "config", "aligned_mtl")}


@pytest.mark.parametrize("name, options", METHODS, ids=IDS)
@pytest.mark.parametrize("seed", range(5))
def test_a_batch_is_each_member_alone(name, options, seed):
    """Four Gramians in one [4, K, K] batch (B ≠ K, so a mask broadcast along the wrong axis
    fails): full rank, rank 2, all zero, and one with a NaN entry. Each member's weights equal
    the one-matrix call's; the bad member gives the zero-Gramian answer and leaves the others
    alone. Measured over seeds 0..4: |difference| ≤ 1.3e-12 (bound 1e-10)."""
    batched, agg = _torch_path(name, options)
    full, low = _gram(seed, K, K), _gram(seed + 100, K, 2)
    nan = full.clone()
    nan[1, 2] = float("nan")
    out = batched(torch.stack([full, low, torch.zeros(K, K, dtype=torch.float64), nan]))
    assert out.shape == (4, K) and out.dtype == torch.float64
    for i, g in enumerate((full, low)):
        torch.testing.assert_close(out[i], agg.weights_from_gramian(g / g.diagonal().max()), rtol=0, atol=1e-10)
    for i in (2, 3):
        torch.testing.assert_close(out[i], AT_ZERO[name], rtol=0, atol=0)


@pytest.mark.parametrize("name, options", METHODS, ids=IDS)
@pytest.mark.parametrize("k", [4, 20], ids=["host-path", "torch-path"])
@pytest.mark.parametrize("scale", [1e-24, 1e24])
def test_direct_calls_do_not_depend_on_the_gramians_scale(name, options, k, scale):
    """The weights are scale-free in G, also when a user passes G unnormalised (the aggregator
    call normalises; a direct call must not need it): rank-deficient G times 1e±24 (gradients
    of 1e±12) gives G's weights. K = 4 takes the Python-float path, K = 20 the torch path."""
    agg = build(name, **options)
    for seed in range(3):
        g = _gram(seed, k, max(k // 2, 1))
        g = g / g.diagonal().max()
        torch.testing.assert_close(agg.weights_from_gramian(scale * g), agg.weights_from_gramian(g), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name, options", METHODS, ids=IDS)
@pytest.mark.parametrize("k", [4, 20], ids=["host-path", "torch-path"])
def test_weights_come_back_in_the_gramians_dtype(name, options, k):
    agg = build(name, **options)
    g = _gram(0, k, k).float()
    assert agg.weights_from_gramian(g / g.diagonal().max()).dtype == torch.float32


@pytest.mark.parametrize("seed", range(10))
def test_config_cuts_the_rounding_of_a_float32_gramian(seed):
    """A rank-2 G rounded to float32 has eigenvalues of UUᵀ of order ε₃₂ where the exact ones
    are 0. ConFIG's pinv cuts below K ε₃₂ λ_max (as TorchJD's float32 pinv); the rounding
    perturbs an eigenvalue by at most ‖E‖₂ ≤ K ε₃₂/2 · max|UUᵀ| (below the cut), so the float32
    weights equal the float64 ones to float32 accuracy (measured over seeds 0..9: ≤ 2.2e-7 relative
    to max|w|; bound 1e-4). Keeping those eigenvalues (float64's cut) inflates the weights by
    ~1/ε₃₂."""
    g = _gram(seed, K, 2)
    g = g / g.diagonal().max()
    agg = build("config")
    exact = agg.weights_from_gramian(g)
    rounded = agg.weights_from_gramian(g.float()).double()
    assert (rounded - exact).abs().max() <= 1e-4 * exact.abs().max()


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("aligned_mtl", {"scale_mode": "max"}, r"^AlignedMTL option scale_mode='max' is not valid"),
        ("aligned_mtl", {"pref_vector": [-1.0]}, r"^AlignedMTL option pref_vector=\[-1.0\] is not valid"),
        ("config", {"pref_vector": [0.0, 0.0]}, r"^ConFIG option pref_vector=\[0.0, 0.0\] is not valid"),
    ],
)
def test_errors_name_the_method_and_the_option(name, options, message):
    with pytest.raises(ValueError, match=message):
        build(name, **options)


@pytest.mark.parametrize("name", ["aligned_mtl", "config"])
def test_a_preference_of_the_wrong_length_names_the_method(name):
    owner = {"aligned_mtl": "AlignedMTL", "config": "ConFIG"}[name]
    with pytest.raises(ValueError, match=rf"^{owner} pref_vector has 2 entries but got K=3"):
        build(name, pref_vector=[1.0, 2.0])(torch.ones(3, 4))


@pytest.mark.parametrize("name, options", METHODS, ids=IDS)
def test_weights_from_gramian_takes_a_batch(name, options):
    """The public ``weights_from_gramian`` on [B, K, K] (e.g. m particles' Gramians): [B, K]
    weights, each member's equal to a call on it alone (the host path)."""
    agg = build(name, **options)
    grams = torch.stack([_gram(s, K, K - s) for s in range(3)])
    grams = grams / grams.diagonal(dim1=-2, dim2=-1).amax(-1)[:, None, None]
    out = agg.weights_from_gramian(grams)
    assert out.shape == (3, K)
    for i in range(3):
        torch.testing.assert_close(out[i], agg.weights_from_gramian(grams[i]), rtol=0, atol=1e-10)
