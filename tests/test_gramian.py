"""morl.solvers.gramian: the chunked CPU product (3 ≤ K ≤ 10, large D), the block-column one
(K ≥ BLOCKED_K, large K²D) and the two-row one (K = 2, large D) are the Gramian."""

import importlib

import pytest
import torch

from morl.solvers.cpu_cache import last_level_cache_bytes
from morl.solvers.gramian import (BLOCK_COLS, BLOCKED_K, BLOCKED_MIN_D, BLOCKED_MIN_WORK, BMM_CHUNK, CHUNKED_K, CHUNKED_MIN_D, TWO_ROW_MIN_D,
                                  _product, block_starts, chunk_min_bytes, gram_scale, gramian, gramian_and_top, normalized_gramian)


@pytest.fixture
def chunk_small_matrices(monkeypatch):
    """Route matrices of any size to the chunked product (the cut is a speed choice only)."""
    monkeypatch.setattr(importlib.import_module("morl.solvers.gramian"), "CHUNK_MIN_BYTES", 0)


def test_the_chunked_product_is_taken_for_large_matrices_only(monkeypatch):
    """2 ≤ K ≤ 10 and at least CHUNK_MIN_BYTES (and CHUNKED_MIN_D columns): chunk by chunk; other
    matrices: one plain product (spied on through torch.bmm, which only the chunks call). The
    cut counts bytes, so a float64 matrix reaches it at half the entries of a float32 one."""
    calls = []
    real = torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    module = importlib.import_module("morl.solvers.gramian")
    assert module.CHUNK_MIN_BYTES > 0
    d = CHUNKED_MIN_D + 1
    for k, d, dtype, cut, chunked in ((8, d, torch.float32, 0, True), (8, d, torch.float32, 4 * 8 * d + 1, False),
                                      (8, d, torch.float32, 4 * 8 * d, True), (8, d, torch.float64, 4 * 8 * d + 1, True),
                                      (8, d, torch.float64, 8 * 8 * d + 1, False), (3, d, torch.float32, 0, True),
                                      (2, d, torch.float32, 0, False),
                                      (8, CHUNKED_MIN_D - 1, torch.float32, 0, False), (8, CHUNKED_MIN_D, torch.float32, 0, True),
                                      (11, d, torch.float32, 0, False),
                                      (1, d, torch.float32, 0, False)):
        monkeypatch.setattr(module, "CHUNK_MIN_BYTES", cut)
        calls.clear()
        _product(torch.ones(k, d, dtype=dtype))
        assert bool(calls) == chunked, (k, d, dtype, cut)
    # other devices (here meta, as a stand-in for CUDA) keep one plain product at any size
    monkeypatch.setattr(module, "CHUNK_MIN_BYTES", 0)
    calls.clear()
    assert _product(torch.empty(8, d, device="meta")).shape == (8, 8) and not calls


def _fake_caches(root, entries):
    """A sysfs-like cache folder: one indexN folder per (level, type, size) entry."""
    for i, (level, kind, size) in enumerate(entries):
        folder = root / f"index{i}"
        folder.mkdir(parents=True)
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    return root


def test_last_level_cache_is_the_highest_data_or_unified_level(tmp_path):
    """This machine's layout (Zen 1: 32K/64K L1, 512K L2, 8192K L3), in any folder order, and
    an instruction cache never counts, whatever its level."""
    zen1 = [(1, "Data", "32K"), (1, "Instruction", "64K"), (2, "Unified", "512K"), (3, "Unified", "8192K")]
    assert last_level_cache_bytes(_fake_caches(tmp_path / "a", zen1)) == 8 * 2**20
    assert last_level_cache_bytes(_fake_caches(tmp_path / "b", zen1[::-1])) == 8 * 2**20
    instruction_first = [(1, "Instruction", "32K"), (2, "Unified", "2M"), (3, "Unified", "32M")]
    assert last_level_cache_bytes(_fake_caches(tmp_path / "d", instruction_first)) == 32 * 2**20
    assert last_level_cache_bytes(_fake_caches(tmp_path / "e", [(2, "Unified", "1048576")])) == 2**20  # bytes, no unit
    odd = [(2, "Unified", "1M"), (3, "Instruction", "64M"), (1, "Data", "48K")]
    assert last_level_cache_bytes(_fake_caches(tmp_path / "c", odd)) == 2**20


@pytest.mark.parametrize("size", ["", "K", "-8K", "8X", "0K", "8.5M"])
def test_an_unreadable_cache_size_is_unknown(tmp_path, size):
    """A missing folder, no entries, or a size that is not a positive whole number of B/K/M/G:
    None (the Gramian then keeps its fixed cut), never an exception."""
    (tmp_path / "a").mkdir()
    assert last_level_cache_bytes(tmp_path / "missing") is None
    assert last_level_cache_bytes(tmp_path / "a") is None
    assert last_level_cache_bytes(_fake_caches(tmp_path / "b", [(3, "Unified", size)])) is None


def test_the_chunk_cut_is_three_quarters_of_the_cache_or_16_mb():
    """6 MB on an 8 MB L3 (the measured break-even there), 24 MB on a 32 MB one, 16 MB unknown."""
    assert chunk_min_bytes(8 * 2**20) == 6 * 2**20
    assert chunk_min_bytes(32 * 2**20) == 24 * 2**20
    assert chunk_min_bytes(None) == 16 * 2**20


@pytest.mark.parametrize("k", [CHUNKED_K[0], 5, 8, CHUNKED_K[1]])
def test_chunked_product_against_float64(k, chunk_small_matrices):
    """Column chunks of BMM_CHUNK, one batched product summed in float32: relative error
    ≤ 1.5e-6 of the largest entry against the float64 product (measured ≤ 4.6e-7 over seeds
    0..59, K = 2, 5, 6, 8, 10; MKL's plain product on the same matrices: up to 3.8e-6; a
    dropped or doubled chunk costs ~BMM_CHUNK/D ≈ 0.12). The same for a column-major matrix
    (strides (1, K): the chunks are then a view of other strides), ≤ 6e-6 (measured ≤ 2.4e-6).
    D is not a multiple of BMM_CHUNK, so the columns left over are covered."""
    d = CHUNKED_MIN_D + 123
    assert d % BMM_CHUNK
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        grads = torch.randn(k, d, generator=gen) + 0.5 * torch.randn(1, d, generator=gen)
        exact = grads.double() @ grads.double().T
        gram = gramian(grads)
        assert gram.dtype == torch.float32 and gram.shape == (k, k)
        assert float((gram.double() - exact).abs().max()) <= 1.5e-6 * float(exact.abs().max())
        torch.testing.assert_close(gram, gram.T, rtol=1e-6, atol=1e-6 * float(exact.abs().max()))
        # the product itself (gramian() would hide a product that came out all zero: it then
        # redoes it on rescaled rows)
        assert float((_product(grads).double() - exact).abs().max()) <= 1.5e-6 * float(exact.abs().max())
        column_major = grads.T.contiguous().T
        assert float((_product(column_major).double() - exact).abs().max()) <= 6e-6 * float(exact.abs().max())


def test_two_rows_take_one_matrix_vector_product_from_two_row_min_d(monkeypatch):
    """K = 2 on CPU with contiguous rows, from TWO_ROW_MIN_D columns: J g₀ and g₁·g₁ (spied on
    through torch.mv, which no other route calls); one column fewer, strided rows (a
    column-major matrix), a batch, K = 3 or another device (meta): another route."""
    calls = []
    real = torch.mv
    monkeypatch.setattr(torch, "mv", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    d = TWO_ROW_MIN_D
    for grads, taken in ((torch.ones(2, d), True), (torch.ones(2, d, dtype=torch.float64), True),
                         (torch.ones(3, d)[1:], True), (torch.ones(2, d - 1), False), (torch.ones(d, 2).T, False),
                         (torch.ones(1, 2, d), False), (torch.ones(3, d), False), (torch.empty(2, d, device="meta"), False)):
        calls.clear()
        gram = _product(grads)
        assert bool(calls) == taken and gram.shape[-1] == grads.shape[-2], (grads.shape, grads.stride())


def test_the_two_row_product_against_float64():
    """Relative error ≤ 5e-6 of the largest entry against the float64 product at D = TWO_ROW_MIN_D
    + 123 (measured ≤ 2.4e-6 over seeds 0..59; MKL's plain product 5.4e-7 there, 2.8e-5 for
    both at D = 1e6), for row-contiguous matrices with a row stride of their own; the two
    off-diagonal entries are one value; a swapped or dropped term costs ~0.5 of G."""
    d = TWO_ROW_MIN_D + 123
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        grads = torch.randn(2, d, generator=gen) + 0.5 * torch.randn(1, d, generator=gen)
        grads[1] *= 3.0  # the rows differ in length, so G_00 and G_11 cannot stand in for each other
        exact = grads.double() @ grads.double().T
        for rows in (grads, torch.cat((grads, grads[:1])).view(3, d)[[0, 1]], torch.randn(2, d + 7)[:, :d].copy_(grads)):
            gram = _product(rows)
            assert gram.dtype == torch.float32 and float(gram[0, 1]) == float(gram[1, 0])
            assert float((gram.double() - exact).abs().max()) <= 5e-6 * float(exact.abs().max())
            assert gram.tolist() == gramian(rows).tolist()


def test_top_is_the_largest_diagonal_entry_and_absent_off_cpu():
    grads = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    gram, top = gramian_and_top(grads)
    assert top == 25.0 and gram.tolist() == [[25.0, 3.0], [3.0, 1.0]]
    batched = gramian_and_top(grads.unsqueeze(0).expand(2, 2, 2))
    assert batched[1] is None and batched[0].tolist() == [gram.tolist()] * 2  # batched: one top per matrix
    assert gramian_and_top(torch.zeros(2, 3))[1] is None  # all zero: the rescaled fallback decides
    meta = gramian_and_top(torch.empty(7, 2 * CHUNKED_MIN_D, device="meta"))
    assert meta[0].device.type == "meta" and meta[0].shape == (7, 7) and meta[1] is None


def _blocked_d(k: int) -> int:
    """The fewest columns that send K rows to the block-column product."""
    return max(-(-BLOCKED_MIN_WORK // (k * k)), BLOCKED_MIN_D)


def test_blocks_start_every_32_rows_with_a_thin_last_block_merged():
    """Blocks of BLOCK_COLS; a last block of fewer than 16 joins the one before."""
    assert BLOCK_COLS == 32
    expected = {1: [0], 31: [0], 47: [0], 48: [0, 32], 79: [0, 32], 80: [0, 32, 64], 100: [0, 32, 64],
                112: [0, 32, 64, 96], 200: [0, 32, 64, 96, 128, 160]}
    assert {k: block_starts(k) for k in expected} == expected


def test_the_block_column_product_is_taken_for_many_rows_and_enough_work(monkeypatch):
    """K ≥ BLOCKED_K rows, D ≥ BLOCKED_MIN_D columns and K²D ≥ BLOCKED_MIN_WORK on CPU: block
    columns; one row fewer, one column fewer, a batch or another device (meta, standing in for
    CUDA): the plain product."""
    module = importlib.import_module("morl.solvers.gramian")
    calls = []
    real = module._block_column_product
    monkeypatch.setattr(module, "_block_column_product", lambda g: calls.append(tuple(g.shape)) or real(g))
    k, d = BLOCKED_K, _blocked_d(BLOCKED_K)
    exact = BLOCKED_MIN_WORK // 64**2  # K = 64 reaches the cut exactly
    assert _blocked_d(200) == BLOCKED_MIN_D == 512 > BLOCKED_MIN_WORK / 200**2  # K = 200: D binds, not K²D
    for shape, blocked in (((k, d), True), ((k - 1, 10 * d), False), ((k, d - 1), False), ((200, 512), True),
                           ((200, 511), False), ((64, exact), True), ((64, exact - 1), False)):
        calls.clear()
        assert _product(torch.ones(shape)).shape == (shape[0], shape[0])
        assert bool(calls) == blocked, shape
    calls.clear()
    assert _product(torch.ones(2, k, d)).shape == (2, k, k) and not calls
    assert _product(torch.empty(k, d, device="meta")).shape == (k, k) and not calls


@pytest.mark.parametrize("k, blocks", [(48, [(48, 32), (16, 16)]), (100, [(100, 32), (68, 32), (36, 36)])])
def test_the_block_columns_make_only_the_lower_blocks(k, blocks):
    """The products are the block columns from the diagonal down, each with every row below as
    the left operand (the shape MKL runs faster, session 20): [K - a, D] @ [D, b - a], in that
    order (a hand list: K = 48 is 32 + 16 columns, K = 100 is 32 + 32 + 36), so 2·D·Σ rows ×
    columns flops (torch's flop counter) against 2·D·K² for the plain product: 0.78 and 0.67."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    class Shapes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.mm.default:
                self.seen.append((args[0].shape[0], args[1].shape[1]))
            return func(*args, **(kwargs or {}))

    d = _blocked_d(k)
    with FlopCounterMode(display=False) as counter, Shapes() as shapes:
        _product(torch.ones(k, d))
    assert shapes.seen == blocks
    assert counter.get_total_flops() == 2 * d * sum(r * c for r, c in blocks) < 2 * d * k * k


@pytest.mark.parametrize("k", [BLOCKED_K, 79, 101, 200])
def test_block_column_product_against_float64(k):
    """The block-column product (lower block columns, mirrored) is the Gramian: error against
    float64 within sqrt(D)·ε of the largest entry, the typical rounding of a float32 sum of D
    terms, which depends on how the machine's BLAS blocks its sums (1.0e-5 at K = 48,
    D = 7285; measured ≤ 3.2e-7 on a Zen 1 over seeds 0..59 at K = 48, 79, 101 and 200, as
    the plain product), over 5 seeds: a missing, misplaced or unmirrored block is off by O(1).
    Exactly symmetric, for a merged thin last block (79 = 32 + 47) and ragged ones (101, 200),
    row- and column-major."""
    d = _blocked_d(k) + 3
    bound = d**0.5 * torch.finfo(torch.float32).eps
    for seed in range(5):
        gen = torch.Generator().manual_seed(seed)
        grads = torch.randn(k, d, generator=gen) + 0.5 * torch.randn(1, d, generator=gen)
        grads[seed] *= -3.0  # rows of different norms and a sign, so no block is interchangeable
        grads[-1] *= 2.0  # ... and the last block differs from the others
        exact = grads.double() @ grads.double().T
        for layout in (grads, grads.T.contiguous().T):
            gram = _product(layout)  # the product itself, not gramian()'s rescaled fallback
            assert float((gram.double() - exact).abs().max()) <= bound * float(exact.abs().max())
            assert torch.equal(gram, gram.T)
        assert torch.equal(gramian(grads), _product(grads))


def test_gradients_flow_through_the_block_column_product():
    """Autograd through the block columns, their mirror and the triangle masks gives the plain
    product's gradient (float64, to 1e-12 relative; measured 5e-16)."""
    k = BLOCKED_K
    grads = _rows(5, k, _blocked_d(k), torch.float64).requires_grad_()
    weights = torch.randn(k, k, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    (ours,) = torch.autograd.grad((_product(grads) * weights).sum(), grads)
    (plain,) = torch.autograd.grad(((grads @ grads.T) * weights).sum(), grads)
    assert float((ours - plain).abs().max()) <= 1e-12 * float(plain.abs().max())


@pytest.mark.parametrize("k", [CHUNKED_K[0], BLOCKED_K])
def test_chunked_and_block_column_products_keep_float64(k, chunk_small_matrices):
    """Both CPU products accumulate in the rows' dtype: float64 rows give the float64 Gramian to
    1e-12 relative (a float32 accumulator would be off by ~1e-7)."""
    grads = _rows(k, k, max(CHUNKED_MIN_D, _blocked_d(k)) + 7, torch.float64)
    exact = grads @ grads.T
    gram = _product(grads)
    assert gram.dtype == torch.float64
    assert float((gram - exact).abs().max()) <= 1e-12 * float(exact.abs().max())


def _rows(seed: int, k: int, d: int, dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, d, generator=gen, dtype=torch.float64) + 0.5 * torch.randn(1, d, generator=gen, dtype=torch.float64)
    j[0] *= -2.0  # rows of different norms and a sign
    return j.to(dtype)


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e-12, 1.0, 1e12, 1e20, 1e30])
@pytest.mark.parametrize("batched", [False, True])
def test_float32_gramian_at_any_scale_against_float64(scale, batched):
    """Rows of float32 entries ~scale: from 1e-20 down the float32 product underflows (G ~ scale²
    ≤ 1e-40), from 1e20 up it overflows; on CPU the product is then redone on rows divided by
    their largest |entry| and returned in float64. Either way G matches the float64 product of
    the same float32 rows to 1e-6 of its largest entry (float32 sums; measured ≤ 1.9e-7), for
    one matrix and for a batch of two at scales 1/scale apart (the second all negative), each
    divided by its own largest |entry|."""
    grads = _rows(0, 5, 300) * scale
    grads[2] = -grads[2].abs()  # a row whose largest |entry| is negative
    if batched:  # members scaled apart (scale and 1/scale): each is rescaled by its own largest entry
        grads = torch.stack([grads, -_rows(1, 5, 300).abs() / scale])
    exact = grads.double() @ grads.double().transpose(-2, -1)
    gram = gramian(grads)
    assert gram.shape == exact.shape and bool(torch.isfinite(gram).all())
    top = exact.diagonal(dim1=-2, dim2=-1).amax(-1)[..., None, None]
    assert bool(((gram.double() - exact).abs() <= 1e-6 * top).all())
    normal = 1e-12 <= scale <= 1e12
    assert gram.dtype == (torch.float32 if normal else torch.float64)


@pytest.mark.parametrize("member, row", [(0, 0), (1, 4), (2, 2)])
def test_one_overflowing_diagonal_entry_in_a_batch_is_rescaled(member, row):
    """A batch of three float32 matrices whose only out-of-range entry is one diagonal entry
    (a row ~1e20 among rows ~1: its G_kk ~ 1e40 overflows, its other entries ~1e20 do not) is
    redone on rescaled rows: every member finite and within 1e-6 of the float64 product."""
    grads = torch.stack([_rows(seed, 5, 40) for seed in range(3)])
    grads[member, row] *= 1e20
    exact = grads.double() @ grads.double().transpose(-2, -1)
    gram = gramian(grads)
    assert bool(torch.isfinite(gram).all())
    top = exact.diagonal(dim1=-2, dim2=-1).amax(-1)[..., None, None]
    assert bool(((gram.double() - exact).abs() <= 1e-6 * top).all())


def test_an_all_zero_matrix_has_a_zero_gramian():
    """All zero rows (out of range for the direct product's check, so rescaled): G = 0, not NaN."""
    for grads in (torch.zeros(3, 5), torch.zeros(2, 3, 5)):
        gram = gramian(grads)
        assert gram.shape == grads.shape[:-1] + (3,) and bool((gram == 0).all())


def test_a_non_finite_row_keeps_its_nan_or_inf_diagonal():
    """A NaN or inf entry is not rescaled away: the Gramian's diagonal names the bad row (the
    aggregators' non-finite policy reads it) and the good rows' entries stay exact."""
    grads = _rows(2, 3, 7)
    grads[1, 4] = float("nan")
    gram = gramian(grads)
    assert torch.isnan(gram[1, 1]) and torch.isfinite(gram[0, 0]) and torch.isfinite(gram[2, 2])
    for row in range(3):  # Python's max skips a NaN after the first entry: the sum catches it
        bad = _rows(2, 3, 7)
        bad[row, 4] = float("nan")
        assert gramian_and_top(bad)[1] is None
    grads[1, 4] = float("inf")
    assert torch.isinf(gramian(grads)[1, 1])
    exact = grads[[0, 2]].double() @ grads[[0, 2]].double().T
    torch.testing.assert_close(gramian(grads)[[0, 2]][:, [0, 2]].double(), exact, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, None])
def test_normalized_gramian_is_g_over_its_largest_diagonal_entry(dtype):
    """(G / s, s), s = max_k ‖g_k‖², per member of a batch; dtype None keeps the input's dtype;
    an all-zero matrix has s = 1 (G / s = 0, not NaN)."""
    grads = torch.stack([_rows(3, 4, 9), _rows(4, 4, 9) * 1e3, torch.zeros(4, 9)])
    gram, s = normalized_gramian(grads, dtype)
    exact = grads.double() @ grads.double().transpose(-2, -1)
    expected_s = exact.diagonal(dim1=-2, dim2=-1).amax(-1)
    expected_s[2] = 1.0
    assert gram.dtype == (dtype or torch.float32) and s.shape == (3,)
    torch.testing.assert_close(s.double(), expected_s, rtol=1e-6, atol=0)
    torch.testing.assert_close(gram.double(), exact / expected_s[:, None, None], rtol=1e-5, atol=1e-6)
    one, s_one = normalized_gramian(grads[1])  # one matrix: a 0-d scale
    assert s_one.shape == () and one.dtype == torch.float64
    torch.testing.assert_close(one, gram[1].to(one.dtype), rtol=1e-6, atol=1e-7)
    assert float(gram[:2].diagonal(dim1=-2, dim2=-1).amax()) == pytest.approx(1.0, abs=1e-6)


def test_gram_scale_is_one_for_tiny_or_zero_gramians():
    """Below √(smallest normal) the largest diagonal entry is replaced by 1 (dividing by it would
    overflow the solvers' iterates); above, it is the entry itself."""
    tiny = torch.finfo(torch.float64).tiny ** 0.5
    grams = torch.stack([torch.eye(2, dtype=torch.float64) * v for v in (0.0, 0.5 * tiny, 2 * tiny, 3.0)])
    grams[3, 1, 1] = 7.0
    assert gram_scale(grams).flatten().tolist() == [1.0, 1.0, 2 * tiny, 7.0]
    assert gram_scale(grams).shape == (4, 1, 1)
