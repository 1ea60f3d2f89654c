"""The Python-float path for one small CPU Gramian.

Up to :data:`HOST_MAX_K` rows, a method's K×K work is mostly dispatch: each torch op on a
K×K tensor costs 2-3 µs for a few ns of arithmetic, and a K = 2..10 call of IMTL-G, Aligned-MTL,
Krum or MGDA's closed form is 20-30 such ops. On the CPU the Gramian is in host memory, so
reading it is no synchronisation: these helpers read it (and an eigendecomposition) as Python
floats and turn the finished weights back into one tensor. Every read of the path happens
here, so a device-traffic guard can allow exactly these functions on the CPU; on any other
device, under ``torch.compile`` (:func:`morl.host_reads.reads_are_free`), batched, with
autograd or non-finite, :func:`gramian_rows` says None and the method's torch path runs.
"""

from __future__ import annotations

import math
from array import array

import torch

from morl.host_reads import ARRAY_CODE, cpu_tensor, reads_are_free

#: Largest K taken by the Python path (at K = 16 a K² Python loop already costs about as
#: much as the torch ops it replaces).
HOST_MAX_K = 16


def one_free_gramian(gram: torch.Tensor) -> bool:
    """One Gramian (not a batch) without autograd whose values can be read for free (CPU, not
    under ``torch.compile``): the condition of every read of this module and of Aligned-MTL's
    larger CPU path. Decided before anything is read: elsewhere each read is a host sync."""
    return gram.dim() == 2 and not gram.requires_grad and reads_are_free(gram)


def gramian_rows(gram: torch.Tensor) -> list[list[float]] | None:
    """``gram`` ([K, K], K ≤ HOST_MAX_K, CPU, no autograd, finite) as nested float lists, or None."""
    if gram.shape[-1] > HOST_MAX_K or not one_free_gramian(gram):
        return None
    rows = gram.tolist()
    # NaN/inf anywhere makes the sum NaN/inf (a sum that overflows from finite entries, beyond
    # 1e308, is declined too: the torch path takes it); ~10x cheaper than testing each entry
    return rows if math.isfinite(sum(map(sum, rows))) else None


def eigh_lists(gram: torch.Tensor, rows: list[list[float]]) -> tuple[list[float], list[list[float]]]:
    """(eigenvalues ascending, eigenvectors as ROWS: ``vecs[j]`` belongs to ``lam[j]``) of a
    CPU Gramian given also as ``rows`` (:func:`gramian_rows`), in float64 lists (rows, so that
    dot products run over one list). K = 2 in closed form (:func:`eigh_2x2`; LAPACK's call
    and its lists are ~9 µs, a fifth of a K = 2 IMTL-G call at D = 1e4)."""
    if len(rows) == 2:
        return eigh_2x2(rows[0][0], rows[0][1], rows[1][1])
    lam, vec = torch.linalg.eigh(gram.to(torch.float64))
    return lam.tolist(), vec.mT.tolist()


def inverse_lists(gram: torch.Tensor) -> list[list[float]] | None:
    """G⁻¹ of a CPU Gramian as float64 rows, from its Cholesky factor; None when G is not
    positive definite in float64 (callers decide whether the inverse is the one they need)."""
    factor, info = torch.linalg.cholesky_ex(gram.to(torch.float64))
    return None if info.item() else torch.cholesky_inverse(factor).tolist()


def inverse_factor(gram: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float, float] | None:
    """(L⁻¹ for G = L Lᵀ, G's diagonal, tr G, tr G⁻¹ = ‖L⁻¹‖_F²), in float64, for one CPU
    Gramian of any K (no autograd): the larger-K counterpart of :func:`inverse_lists`, whose
    Python lists cost K² reads. None where reads are not free or G is not positive definite in
    float64. A non-finite G gives a NaN or infinite trace, which callers' certificates decline."""
    if not one_free_gramian(gram):
        return None
    g = gram.to(torch.float64)
    factor, info = torch.linalg.cholesky_ex(g)
    if info.item():
        return None
    inverse = torch.linalg.solve_triangular(factor, torch.eye(g.shape[0], dtype=torch.float64), upper=False)
    diagonal = g.diagonal()
    return inverse, diagonal, diagonal.sum().item(), inverse.square().sum().item()


def eigh_2x2(a: float, b: float, c: float) -> tuple[list[float], list[list[float]]]:
    """:func:`eigh_lists` of the positive semi-definite [[a, b], [b, c]] (a Gramian: a, c ≥ 0) by
    one Jacobi rotation (Golub & Van Loan, Alg. 8.5.1 in angle form): λ = m ± r with
    m = (a + c)/2, r = hypot((a − c)/2, b); the larger eigenvector (cos θ, sin θ) with
    (cos 2θ, sin 2θ) = ((a − c)/2, b)/r, its half-angle taken from whichever of 1 ± cos 2θ does
    not cancel. The smaller eigenvalue is det/λ_max with the determinant's products split
    exactly (Dekker's two-product): m − r would lose it to cancellation (relative accuracy
    instead of ~ε λ_max, so the rank cut K ε λ_max of the callers sees the rows' own rank, not
    rounding). The entries are first scaled by a power of 2 (exact) to at most 1, so no product
    over- or underflows for any finite Gramian."""
    top = max(a, abs(b), c)
    if not top > 0.0:  # zero (or NaN, which callers never pass: gramian_rows refuses it)
        return [a, c], [[1.0, 0.0], [0.0, 1.0]]
    scale = math.ldexp(1.0, math.frexp(top)[1])  # 2^e ≥ top
    a, b, c = a / scale, b / scale, c / scale
    h, r = 0.5 * (a - c), math.hypot(0.5 * (a - c), b)
    if r == 0.0:  # a multiple of the identity: any basis
        return [a * scale, c * scale], [[1.0, 0.0], [0.0, 1.0]]
    big = 0.5 * (a + c) + r
    small = _det_2x2(a, b, c) / big
    cos2, sin2 = h / r, b / r
    if cos2 >= 0.0:
        cs = math.sqrt(0.5 * (1.0 + cos2))
        sn = sin2 / (2.0 * cs)
    else:
        sn = math.copysign(math.sqrt(0.5 * (1.0 - cos2)), sin2)
        cs = sin2 / (2.0 * sn)
    return [small * scale, big * scale], [[-sn, cs], [cs, sn]]


def _det_2x2(a: float, b: float, c: float) -> float:
    """a·c − b² with each product's rounding error recovered exactly (Dekker 1971; no
    math.fma before Python 3.13), so the difference is correct to a few ulps of itself."""
    p, e_p = _two_product(a, c)
    q, e_q = _two_product(b, b)
    return (p - q) + (e_p - e_q)


def _two_product(x: float, y: float) -> tuple[float, float]:
    """(x·y rounded, its exact rounding error), by Veltkamp's splitting into 26-bit halves
    (|x|, |y| ≤ 1 here: the split's 2^27 x cannot overflow)."""
    prod = x * y
    x_hi, x_lo = _split(x)
    y_hi, y_lo = _split(y)
    return prod, ((x_hi * y_hi - prod) + x_hi * y_lo + x_lo * y_hi) + x_lo * y_lo


def _split(x: float) -> tuple[float, float]:
    t = 134217729.0 * x  # 2^27 + 1
    hi = t - (t - x)
    return hi, x - hi


def as_list(t: torch.Tensor) -> list:
    """A small CPU tensor's values (preferences, ...) as Python numbers."""
    return t.tolist()


def rounded(x: float, dtype: torch.dtype) -> float:
    """``x`` rounded to ``dtype`` (as ``torch.tensor(x, dtype=dtype).item()``, without a tensor)."""
    code = ARRAY_CODE.get(dtype)
    return array(code, (x,))[0] if code is not None else torch.tensor(x, dtype=dtype).item()


def eps(dtype: torch.dtype) -> float:
    """Machine epsilon of ``dtype`` (``torch.finfo`` is ~1 µs a call; this is a lookup)."""
    return _EPS[dtype]


_EPS = {dt: torch.finfo(dt).eps for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}


def weights_tensor(values: list, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The finished weights (or other small state, e.g. GradVac's targets) as a tensor in
    ``dtype`` (default ``like``'s dtype), on the CPU."""
    dtype = like.dtype if dtype is None else dtype
    if values and isinstance(values[0], list):  # nested: GradVac's 2×2 targets
        return torch.tensor(values, dtype=dtype)
    return cpu_tensor(values, dtype)
