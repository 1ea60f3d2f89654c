"""Which way of forming J Jᵀ is fastest on this CPU, per (K, D)?

MKL's product for a few rows (K = 6..12) runs far below peak, and the fix depends on the CPU:
session 12 found column chunks 2x faster at K = 6..10, D = 1e6 on an AMD EPYC (adopted:
``morl.solvers.gramian.CHUNKED_K``); session 14 found two row blocks (3/4 of the products)
0.75-0.86 of the plain product at K = 8..12, D = 3e4..3.4e5 on the same machine, but 1.3-1.9x
slower at K = 4..6 and 16..24, and could not measure the Intel Xeon of session 13. Session 15
(a Zen 1 EPYC, 8 MB L3) made the cut follow the machine's last-level cache and the chunks one
batched product (``batched_chunks``, for 2 <= K <= 10). Session 16 (same Zen 1) replaced the
two chunked half-size blocks from K = 96 by block rows of 32 (``block_rows``, from K = 48 and
K²D >= 2^26). Session 19 added MKL's own symmetric rank-k update (``mkl_syrk``, where torch's
library has it): on the Zen 1 it ties with the plain product (0.94-1.09), so no BLAS here forms
G in fewer flops' time than gemm. Session 20 found the block rows turned over (``block_columns``:
the same products, MKL's operands the other way round) up to 11 % faster and adopted them; each
block row as one batched product over 4096-column pieces (``block_rows_bmm``) gains nothing.
Before a rule is adopted or moved, run this on each machine and compare:

    OMP_NUM_THREADS=1 .venv/bin/python tools/gramian_variants.py --ks 4,6,8,10,12,16 --ds 3e4,1e5,344008,1e6
    OMP_NUM_THREADS=1 .venv/bin/python tools/gramian_variants.py --ks 48,64,100,200 --ds 1e4,3e4,2e5

Each cell: median ms of calls interleaved across the variants (so load hits all alike), the
ratio to the plain product, and each variant's largest error against the float64 product
relative to max G_kk.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

import torch

gramian_module = importlib.import_module("morl.solvers.gramian")  # the package exports a function of that name


def _two_blocks(grads: torch.Tensor) -> torch.Tensor:
    """G[:, :h] = J J_1ᵀ and G[h:, h:] = J_2 J_2ᵀ as two plain products, G[:h, h:] mirrored."""
    k, h = grads.shape[0], grads.shape[0] // 2
    left = grads @ grads[:h].T
    gram = torch.empty(k, k, dtype=grads.dtype)
    gram[:, :h] = left
    gram[:h, h:] = left[h:].T
    gram[h:, h:] = grads[h:] @ grads[h:].T
    return gram


def _two_blocks_chunked(grads: torch.Tensor, chunk: int = 16384) -> torch.Tensor:
    """The library's form for K >= 96 until session 16: :func:`_two_blocks`, one ``addmm_`` pair
    per ``chunk`` columns."""
    k, h = grads.shape[0], grads.shape[0] // 2
    left = torch.zeros(k, h, dtype=grads.dtype)
    corner = torch.zeros(k - h, k - h, dtype=grads.dtype)
    for start in range(0, grads.shape[1], chunk):
        block = grads[:, start : start + chunk]
        left.addmm_(block, block[:h].T)
        corner.addmm_(block[h:], block[h:].T)
    gram = torch.empty(k, k, dtype=grads.dtype)
    gram[:, :h] = left
    gram[:h, h:] = left[h:].T
    gram[h:, h:] = corner
    return gram


def _chunked(grads: torch.Tensor, chunk: int = 16384) -> torch.Tensor:
    gram = torch.zeros(grads.shape[0], grads.shape[0], dtype=grads.dtype)
    for start in range(0, grads.shape[1], chunk):
        block = grads[:, start : start + chunk]
        gram.addmm_(block, block.T)
    return gram


def _block_rows(grads: torch.Tensor) -> torch.Tensor:
    """The library's form of sessions 16-19: G[a:b, a:] = J[a:b] J[a:]ᵀ (blocks on and right of
    the diagonal, BLOCK_COLS rows each), mirrored. The same products as the block columns the
    library takes now, with MKL's operands the other way round: up to 11 % slower on a Zen 1
    where K is not a multiple of 16 (session 20)."""
    k = grads.shape[0]
    starts = gramian_module.block_starts(k)
    gram = torch.empty(k, k, dtype=grads.dtype)
    for a, b in zip(starts, starts[1:] + [k]):
        gram[a:b, a:] = grads[a:b] @ grads[a:].T
    upper = gram.triu()
    return upper + upper.triu(1).T


def _block_rows_bmm(grads: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Block rows with each block's product one ``bmm`` over CHUNK-column pieces (summed), so that
    MKL packs each piece of J while it is in L2 and reuses it across the block's columns."""
    k, d = grads.shape
    starts = gramian_module.block_starts(k)
    n = d // chunk
    gram = torch.empty(k, k, dtype=grads.dtype)
    for a, b in zip(starts, starts[1:] + [k]):
        rows = grads[a:b, : n * chunk].view(b - a, n, chunk).transpose(0, 1)
        cols = grads[a:, : n * chunk].view(k - a, n, chunk).transpose(0, 1)
        block = torch.bmm(rows, cols.transpose(1, 2)).sum(0)
        if n * chunk < d:
            block.addmm_(grads[a:b, n * chunk :], grads[a:, n * chunk :].T)
        gram[a:b, a:] = block
    upper = gram.triu()
    return upper + upper.triu(1).T


def _mkl_syrk_entry():
    """MKL's ``ssyrk`` in torch's own library, or None. Torch exposes no symmetric rank-k update
    (G = J Jᵀ from half the products), and its static MKL exports no ``ssyrk_``; the internal
    ``mkl_blas_ssyrk`` behind it takes the Fortran arguments (uplo, trans, n, k, alpha, a, lda,
    beta, c, ldc; on AMD CPUs it forwards them to ``mkl_blas_sgemmt``, session 19's disassembly).
    For measuring only: it answers whether any BLAS on this machine forms G faster than gemm."""
    import ctypes
    import os

    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        entry = lib.mkl_blas_ssyrk
    except (OSError, AttributeError):
        return None
    entry.restype = None

    def syrk(grads: torch.Tensor) -> torch.Tensor:
        assert grads.dtype == torch.float32 and grads.stride(1) == 1
        k, d = grads.shape
        out = torch.zeros(k, k)
        ints = [ctypes.c_longlong(x) for x in (k, d, grads.stride(0), k)]
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        # row-major J is the column-major Jᵀ (D×K, lda = row stride): C = (Jᵀ)ᵀ Jᵀ, upper
        # triangle in column-major = lower triangle of the row-major result
        entry(b"U", b"T", ctypes.byref(ints[0]), ctypes.byref(ints[1]), ctypes.byref(one), ctypes.c_void_p(grads.data_ptr()),
              ctypes.byref(ints[2]), ctypes.byref(zero), ctypes.c_void_p(out.data_ptr()), ctypes.byref(ints[3]))
        lower = out.tril()
        return lower + lower.tril(-1).T

    return syrk


VARIANTS = {
    "plain": lambda j: j @ j.T,
    "chunked": _chunked,  # one addmm_ per CHUNK columns (the library's form until session 15)
    "batched_chunks": gramian_module._chunked_product,  # the library's chunked form, at any size
    "two_blocks": _two_blocks,
    "two_blocks_chunked": _two_blocks_chunked,
    "block_rows": _block_rows,  # the library's form from K = 48 in sessions 16-19
    "block_columns": gramian_module._block_column_product,  # the library's form from K = 48 (session 20), at any size
    "block_rows_bmm": _block_rows_bmm,  # session 20: each block row over L2-sized column pieces
    "morl": gramian_module._product,  # what the library does now for this (K, D)
}
_SYRK = _mkl_syrk_entry()
if _SYRK is not None:
    VARIANTS["mkl_syrk"] = _SYRK


def measure(k: int, d: int, seed: int = 0, calls: int | None = None) -> dict[str, tuple[float, float]]:
    grads = torch.randn(k, d, generator=torch.Generator().manual_seed(seed))
    exact = grads.double() @ grads.double().T
    top = float(exact.diagonal().max())
    errors = {name: float((fn(grads).double() - exact).abs().max()) / top for name, fn in VARIANTS.items()}
    if calls is None:  # ~2e8 multiply-adds per variant: 5 calls from K²D = 4e7 on (cells move by ±5 %)
        calls = max(5, min(200, int(2e8 / (k * k * d))))
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(calls):
        for name, fn in VARIANTS.items():
            t0 = time.perf_counter()
            fn(grads)
            times[name].append(time.perf_counter() - t0)
    return {name: (statistics.median(times[name]) * 1e3, errors[name]) for name in VARIANTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="4,6,8,10,12,16", help="comma-separated K values")
    parser.add_argument("--ds", default="3e4,1e5,344008,1e6", help="comma-separated D values")
    parser.add_argument("--calls", type=int, default=None, help="calls per variant (default: by size, 5 to 200)")
    args = parser.parse_args()
    cache = gramian_module.last_level_cache_bytes()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); last-level cache "
          f"{'unknown' if cache is None else f'{cache / 2**20:g} MB'}, chunks from {gramian_module.CHUNK_MIN_BYTES / 2**20:g} MB "
          f"for K in {gramian_module.CHUNKED_K}; block columns of {gramian_module.BLOCK_COLS} from K = {gramian_module.BLOCKED_K} "
          f"and K²D >= {gramian_module.BLOCKED_MIN_WORK}, D >= {gramian_module.BLOCKED_MIN_D}; ms (ratio to plain) [error]")
    for k in (int(x) for x in args.ks.split(",")):
        for d in (int(float(x)) for x in args.ds.split(",")):
            cells = measure(k, d, calls=args.calls)
            plain = cells["plain"][0]
            row = "  ".join(f"{name} {ms:.3f} ({ms / plain:.2f}) [{err:.1e}]" for name, (ms, err) in cells.items())
            print(f"K={k:<3} D={d:<8} {row}", flush=True)


if __name__ == "__main__":
    main()
