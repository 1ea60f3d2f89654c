"""Forming and scaling K×K Gramians, so solvers see numbers of order one at any gradient scale."""

from __future__ import annotations

import math

import torch

from morl.host_reads import reads_are_free
from morl.solvers.cpu_cache import last_level_cache_bytes


def gram_scale(gram: torch.Tensor) -> torch.Tensor:
    """Largest diagonal entry of ``gram`` ([..., K, K]) as ``[..., 1, 1]``; 1 where it is 0 or tiny.

    Dividing by it leaves every solution on the simplex unchanged (the objectives are
    homogeneous in G) while keeping iterations away from under/overflow.
    """
    s = torch.diagonal(gram, dim1=-2, dim2=-1).amax(dim=-1, keepdim=True).unsqueeze(-1)
    tiny = torch.finfo(gram.dtype).tiny ** 0.5
    return torch.where(s > tiny, s, torch.ones_like(s))


def gramian(grads: torch.Tensor) -> torch.Tensor:
    """``grads @ grads.T`` ([..., K, K], in the input's dtype) in ONE pass over the [K, D] matrix
    (a 2-row matrix on CPU reads row 1 twice, which is faster there: :data:`TWO_ROW_MIN_D`).

    No scaled [K, D] copy is made: in float32, rows with entries between 1e-12 and 1e12 (any D
    up to ~1e8) give a finite, normal-range Gramian directly. Outside that range the product
    over/underflows; on CPU (where reading a flag costs nothing) that is detected and the
    product is redone on rows divided by their largest entry. On other devices no flag is read
    (that would be a host sync): an overflowed Gramian gives a non-finite direction, which the
    aggregator's ``check_finite`` policy then reports instead of returning it.
    """
    return gramian_and_top(grads)[0]


def gramian_and_top(grads: torch.Tensor) -> tuple[torch.Tensor, float | None]:
    """:func:`gramian` and, for one CPU matrix in the normal range, its largest diagonal entry
    as a float (read anyway for the range check, so callers normalising by it skip
    :func:`gram_scale`'s reductions); None otherwise (batched, not CPU, or rescaled)."""
    gram = _product(grads)
    if not reads_are_free(grads):
        return gram, None
    # Free on CPU. Read as a list (one op, 1 µs against 2.3 for amax and its float): Python's
    # max skips NaN, so a NaN/inf diagonal entry is caught by the sum (NaN or inf then)
    diag = gram.diagonal().tolist() if gram.dim() == 2 else torch.diagonal(gram, dim1=-2, dim2=-1).reshape(-1).tolist()
    top = max(diag) if math.isfinite(sum(diag)) else math.nan
    low, high = _RANGE[gram.dtype]
    # Finite and not subnormal: only the largest diagonal entry is read, |G_ij| ≤ sqrt(G_ii G_jj)
    # bounds the rest, and a NaN anywhere in G comes from a NaN/inf row, whose diagonal entry is
    # then NaN/inf too. An all-zero G also fails (the rows may have underflowed).
    if low <= top <= high:
        return gram, top if grads.dim() == 2 else None
    return _rescaled_gramian(grads, gram), None


#: (tiny / eps, max) per dtype: the normal range gramian_and_top accepts (torch.finfo is ~1 µs)
_RANGE = {dt: (torch.finfo(dt).tiny / torch.finfo(dt).eps, torch.finfo(dt).max) for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}


#: On CPU (MKL), ``J @ J.T`` for K ≤ 10 rows streams a [K, D] matrix that does not stay in the
#: last-level cache badly: 10 GFLOP/s at K = 6..10, D = 1e6 against 35-50 at K = 16 on a Zen 4
#: (session 12); 5 GB/s at K = 2 on a Zen 1 (session 15). Summing the products of column chunks
#: that stay in L2 gives the same Gramian 1.1-2.5x faster, still in one pass over the matrix, and
#: more accurately (4e-7 against 6e-5 relative error at K = 10, D = 1e6: shorter float32 sums).
#: The chunks are one batched product over a strided view of the matrix (no copy), BMM_CHUNK
#: columns each: one call instead of one per chunk, which matters at K = 2..5 where a chunk's
#: product is cheaper than its call (Zen 1, chunked / plain: K = 2 at D = 3e6 0.70 against 1.15
#: for an ``addmm_`` per 16384 columns; K = 5, D = 1e6 0.51 against 0.62; K = 10, D = 1e6 0.42
#: against 0.44). From K = 12 on MKL's product ties or wins (1.00-1.09). K = 2 takes
#: :func:`_two_row_product` instead.
CHUNKED_K = (3, 10)
BMM_CHUNK = 8192
#: the least D the chunked product takes (the 4 chunks of 16384 columns it was first measured
#: with, session 12). It binds only where the bytes cut below is small: at K ≤ 10 every matrix
#: of 3/4 of an 8 MB cache or more has ≥ 157 286 columns.
CHUNKED_MIN_D = 65_536
#: ... but only for matrices that do not stay in the last-level cache: MKL's plain product wins
#: or ties on those. The break-even, in the matrix's bytes, measured with
#: ``tools/gramian_variants.py`` (medians of interleaved calls, chunked / plain):
#:
#: - Zen 1 EPYC guest, 8 MB L3 (session 15; K = 2..5 measured with the batched chunks, below
#:   the cache 1.1-1.8, from 6.6 MB on 0.88-0.49): K = 6..10 lose 17-39 % at 4-5 MB, tie at 5-6 MB
#:   (1.01-1.02), gain from 6 MB on (K = 10 at 6 MB 0.86, 7.6 MB 0.75, 13.8 MB = MT10's actor
#:   0.53; K = 8 at 8 MB 0.82, 11 MB 0.61; K = 6 at 8.3 MB 0.75);
#: - Zen 4 EPYC guest, 32 MB L3 (session 12): K = 6..8 lose 9-19 % up to 12 MB, K = 10 at
#:   13.7 MB 0.85-1.09 across runs, 0.50-0.97 from 16 MB on.
#:
#: The cut is three quarters of the cache: the break-even on the 8 MB machine; on the 32 MB one
#: it is 24 MB, so matrices of 16-24 MB keep the plain product there (chunks were measured to
#: gain from 16 MB on, by how much in that range was not measured; every bench cell and MT10's
#: actor lie outside it). Where the machine does not report its cache the cut is 16 MB.
CHUNK_CACHE_FRACTION = 0.75
CHUNK_MIN_BYTES_UNKNOWN_CACHE = 16 * 2**20


def chunk_min_bytes(cache_bytes: int | None) -> int:
    """The size from which a Gramian of CHUNKED_K rows is formed by column chunks, for a last-level
    cache of ``cache_bytes`` (None: not known)."""
    if cache_bytes is None:
        return CHUNK_MIN_BYTES_UNKNOWN_CACHE
    return int(CHUNK_CACHE_FRACTION * cache_bytes)


CHUNK_MIN_BYTES = chunk_min_bytes(last_level_cache_bytes())


#: From BLOCKED_K rows on (CPU, K²D ≥ BLOCKED_MIN_WORK, D ≥ BLOCKED_MIN_D), G is formed by block
#: columns of BLOCK_COLS: block column b is [J_b; J_b+1; ...] J_bᵀ, the blocks on and below the
#: diagonal, and the rest is mirrored. With n blocks that is (n + 1) / 2n of the products
#: (K = 100, n = 3: 2/3). These are the products of the block rows J_b [J_b; J_b+1; ...]ᵀ of
#: sessions 16-19 with MKL's operands the other way round: a block row's product is K - a
#: columns wide, a block column's BLOCK_COLS, and where K is not a multiple of 16 MKL runs the
#: narrow ones faster. Zen 1, 1 thread (session 20, ``tools/gramian_variants.py``), block
#: columns against block rows, as ratios to the plain product: K = 50 at D = 1e4 0.87 against
#: 0.94, at 1e6 0.81 against 0.88; K = 100 at D = 1e4 0.79 against 0.83, at 1e6 0.74 against
#: 0.80; within ±5 % of each other at K = 48, 64, 128 and 200. 16-, 24- and 40-column blocks
#: lose to 32 (K = 100, D = 1e5: 0.81, 0.84, 0.79 against 0.77).
#:
#: The cuts K²D ≥ 2^24 and D ≥ 512 are where block columns stop losing (session 20,
#: ``tools/gramian_variants.py --calls 301``, ratios to plain at K²D = 2^24: K = 48 0.97,
#: 56 0.93, 64 0.94, 100 0.90, 128 0.98, but K = 200 (D = 420) 1.06; K = 200 at D = 700 0.91,
#: at 1024 0.86; below 2^24 K = 48 at D = 3000 1.13, K = 64 at D = 2000 1.07, K = 100 at
#: D = 1000 1.02). Block rows needed K²D ≥ 2^26 (session 16: up to 5 % lost below it).
BLOCK_COLS = 32
BLOCKED_K = 48
BLOCKED_MIN_WORK = 2**24
BLOCKED_MIN_D = 512

#: From TWO_ROW_MIN_D columns on (CPU), a 2-row Gramian is J g₀ (one matrix-vector product) and
#: g₁·g₁ (:func:`_two_row_product`). MKL's gemm runs a 2-row product at ~5 GB/s on a Zen 1, its
#: gemv and dot at 12-20: although row 1 is read twice, this takes (session 18, medians of
#: interleaved calls, against the product used before, over several runs: this VM's memory speed
#: varies) 0.95-1.0 of MKL's plain product at D = 1e5, 0.69-1.03 at 2e5-3.4e5, 0.65-0.68 of
#: it and 0.78-0.90 of the column chunks at 1e6, 0.88 of the chunks at 2e6; below ~1e5 the
#: plain product's one call wins. Its float32 sums are as long as the plain product's (error
#: up to ~2e-5 of max G_kk at D = 1e6 against 2e-7 for the chunks: the rounding TorchJD's and
#: every other device's product has). Rows must be contiguous: on strided rows (a column-major
#: matrix) MKL's gemv and dot sum sequentially, 5.7e-4 of max G_kk at D = 1e6.
TWO_ROW_MIN_D = 2**17


def _product(grads: torch.Tensor) -> torch.Tensor:
    """``grads @ grads.T``, by column chunks (``CHUNKED_K`` rows, from ``CHUNK_MIN_BYTES``), block
    columns (from ``BLOCKED_K`` rows) or a matrix-vector product (2 rows, from ``TWO_ROW_MIN_D``
    columns) where that is faster on CPU."""
    k, d = grads.shape[-2], grads.shape[-1]
    if grads.device.type != "cpu" or grads.dim() != 2:
        return grads @ grads.transpose(-2, -1)
    if k >= BLOCKED_K and d >= BLOCKED_MIN_D and k * k * d >= BLOCKED_MIN_WORK:
        return _block_column_product(grads)
    if k == 2 and d >= TWO_ROW_MIN_D and grads.stride(1) == 1:
        return _two_row_product(grads)
    if not CHUNKED_K[0] <= k <= CHUNKED_K[1] or d < CHUNKED_MIN_D or k * d * grads.element_size() < CHUNK_MIN_BYTES:
        return grads @ grads.transpose(-2, -1)
    return _chunked_product(grads)


def _chunked_product(grads: torch.Tensor) -> torch.Tensor:
    """Σ_c J_c J_cᵀ over the column chunks J_c of BMM_CHUNK columns, as one ``bmm`` over the
    view [chunks, K, BMM_CHUNK] of the matrix (splitting its columns is a view for any
    strides), and one product for the columns left over."""
    k, d = grads.shape
    n = d // BMM_CHUNK
    chunks = grads[:, : n * BMM_CHUNK].view(k, n, BMM_CHUNK).transpose(0, 1)
    gram = torch.bmm(chunks, chunks.transpose(1, 2)).sum(0)
    if n * BMM_CHUNK < d:
        rest = grads[:, n * BMM_CHUNK :]
        gram.addmm_(rest, rest.T)
    return gram


def _two_row_product(grads: torch.Tensor) -> torch.Tensor:
    """[[g₀·g₀, g₀·g₁], [g₁·g₀, g₁·g₁]] from J g₀ and g₁·g₁, exactly symmetric (one value for
    both off-diagonal entries)."""
    row = torch.mv(grads, grads[0])
    return torch.cat((row, row[1:], torch.dot(grads[1], grads[1]).unsqueeze(0))).view(2, 2)


def block_starts(k: int) -> list[int]:
    """First rows (and columns) of the blocks of :func:`_block_column_product`: every BLOCK_COLS,
    with a last block of fewer than BLOCK_COLS / 2 merged into the one before (a thin product
    costs nearly as much as a full one)."""
    starts = list(range(0, k, BLOCK_COLS))
    if len(starts) > 1 and k - starts[-1] < BLOCK_COLS // 2:
        starts.pop()
    return starts


def _block_column_product(grads: torch.Tensor) -> torch.Tensor:
    """G = J Jᵀ from its lower block columns G[a:, a:b] = J[a:] J[a:b]ᵀ, mirrored (exactly
    symmetric). Each row slice is a view, for any strides."""
    k = grads.shape[0]
    starts = block_starts(k)
    gram = torch.empty(k, k, dtype=grads.dtype)
    for a, b in zip(starts, starts[1:] + [k]):
        gram[a:, a:b] = grads[a:] @ grads[a:b].T
    lower = gram.tril()  # above the diagonal blocks `gram` holds whatever torch.empty left
    return lower + lower.tril(-1).T


def _rescaled_gramian(grads: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """(rows / a)(rows / a)ᵀ · a² in float64, a the largest |entry| (the slow, always-safe form).
    Non-finite input keeps ``gram`` as it is: its NaN/inf diagonal names the bad rows."""
    dims = (-2, -1)
    amax = torch.maximum(grads.amax(dim=dims, keepdim=True), -grads.amin(dim=dims, keepdim=True))
    if not bool(torch.isfinite(amax).all()):
        return gram
    amax = torch.where(amax > 0, amax, torch.ones_like(amax))
    g = grads * (1.0 / amax)
    return (g @ g.transpose(-2, -1)).to(torch.float64) * amax.to(torch.float64) ** 2


def normalized_gramian(grads: torch.Tensor, dtype: torch.dtype | None = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """``(G / s, s)`` for the rows of ``grads`` ([..., K, D]), s the largest diagonal entry of G.

    G is formed by :func:`gramian` (one pass, no [K, D] copy); only the K×K result is cast to
    ``dtype`` (None keeps the input's dtype, so solvers can tell how precise G is) and scaled.
    ``s`` ([...], 0-d for one matrix) is the scale to multiply back (1 for an all-zero matrix).
    Leading dimensions batch independent problems (e.g. m particles).
    """
    gram = gramian(grads)
    if dtype is not None:
        gram = gram.to(dtype)
    s = gram_scale(gram)
    return gram / s, s.squeeze(-1).squeeze(-1)


#: Rungs of :func:`definite_ridge`'s ladder: (ε/16)·4^j for j < LADDER, up to 6.7e7·ε (float32:
#: 8.0). Measured on float32 Gramians of rank-deficient and Pareto-stationary rows formed by
#: :func:`gramian`: the most negative eigenvalue reaches 58·ε·trace G at K = 3, D = 1e6. The
#: rungs start below ε because the ridge changes the answer wherever the optimum's ‖g_w‖² is
#: within a few δ (a K = 6, rank-2 float32 problem lost 5 % of its worst-task gain at δ = 6ε).
LADDER = 16


def definite_ridge(gram: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``2δ`` ([..., 1, 1]) with D⁻¹GD⁻¹ + δI positive semi-definite, D² = diag G: G + 2δD² is then
    positive definite, by δ in units of each row's norm. δ ≥ ε/16 (ε of ``dtype``).

    A Gramian is known to the rounding of ``dtype`` relative to its rows (|ΔG_ij| ~ ε‖g_i‖‖g_j‖
    times the product's sums): a singular G comes out indefinite. Convex objectives in
    sqrt(wᵀGw) then stop being convex near the null space and grow spurious stationary points
    (CAGrad's dual accepted one whose worst-task gain was 5× below the optimum).

    On CPU δ = max(−λ_min(D⁻¹GD⁻¹), ε/16) exactly (eigvalsh), so the answer moves continuously
    with G's rounding: that rounding depends on the row order (the product's blocking), and a
    ladder's jumps moved float32 CAGrad directions 7× more under a permutation of the rows.
    Elsewhere eigvalsh would sync with the host: δ is the least rung (ε/16)·4^j whose Cholesky
    succeeds (info flags are tensors; all rungs run), at most 4× the CPU value.
    """
    diag = torch.diagonal(gram, dim1=-2, dim2=-1)
    d = torch.where(diag > 0, diag, torch.ones_like(diag)).sqrt()
    unit = gram / (d.unsqueeze(-1) * d.unsqueeze(-2))
    base = torch.finfo(dtype).eps / 16
    if reads_are_free(gram) and bool(torch.isfinite(unit).all()):  # (eigvalsh raises on NaN)
        low = torch.linalg.eigvalsh(unit)[..., :1].unsqueeze(-1)
        return 2 * (-low).clamp(min=base)
    return 2 * _ladder(unit, base)


def _ladder(unit: torch.Tensor, base: float) -> torch.Tensor:
    """The least rung base·4^j (j < LADDER) making ``unit`` + rung·I pass Cholesky, [..., 1, 1]."""
    k = unit.shape[-1]
    eye = torch.eye(k, dtype=unit.dtype, device=unit.device)
    shape = unit.shape[:-2] + (1, 1)
    ridge = torch.full(shape, base * 4.0 ** (LADDER - 1), dtype=unit.dtype, device=unit.device)
    found = torch.zeros(shape, dtype=torch.bool, device=unit.device)
    for rung in range(LADDER):
        delta = base * 4.0**rung
        passed = (torch.linalg.cholesky_ex(unit + delta * eye).info == 0).reshape(shape)
        ridge = torch.where(passed & ~found, torch.full_like(ridge, delta), ridge)
        found = found | passed
    return ridge
