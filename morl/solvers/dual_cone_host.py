"""The dual-cone QP of :mod:`morl.solvers.dual_cone` for small CPU problems, in Python floats.

    z = argmin_{z ≥ c} zᵀĜz,   Ĝ = D⁻¹(G / max G_kk)D⁻¹ + ρI,   c = Du   (as there)

At K = 2..10 with few right-hand sides a torch solve is ~40 tensor operations of 2-3 µs
each, almost all of it dispatch: 0.2 ms against ~0.05 ms for TorchJD's compiled quadprog. On
the CPU the Gramian is in host memory, so reading it costs no synchronisation, and the same
primal-dual active-set rounds (Hintermüller, Ito & Kunisch, SIAM J. Optim. 13(3), 2003) run on
Python lists: a K×K Gaussian elimination per round, a few µs at K ≤ 5. Anything the rounds do
not settle (cycling on a degenerate problem, a zero pivot, non-finite input) returns None and
the torch solvers take the whole problem.
"""

from __future__ import annotations

import math
from operator import mul

from morl.solvers.min_norm import ZERO_ROW

#: The torch solvers take over beyond K = HOST_MAX_K or B·K² = HOST_MAX_WORK (B right-hand
#: sides). A problem's rounds cost about K² Python multiply-adds plus an elimination on its
#: free set only (UPGrad's K problems free ~K/3 rows each on conflicting gradients), while a
#: batched torch round costs ~40 ops at any small size. Measured on the benchmark's matrices
#: (1 thread, warm start, µs of CPU time, Python / torch): B = K: K = 2 16 / 197, K = 5
#: 64 / 200, K = 10 195 / 215 (even), K = 12 about 2x slower in Python (loaded machine: 1570
#: / 840 wall); B = 1: K = 10 25 / 124, K = 16 150 / 650 (wall, loaded).
HOST_MAX_K = 16
HOST_MAX_WORK = 1000
#: Relative feasibility slack of a free row, as :func:`morl.solvers.dual_cone.active_set_steps`.
SLACK = 1e-12


def equilibrated(gram: list[list[float]], ridge: float) -> tuple[list[list[float]], list[float]] | None:
    """(Ĝ, d) as :func:`morl.solvers.min_norm.equilibrate` of G / gram_scale(G); None when
    G has a non-finite entry."""
    k = len(gram)
    if not math.isfinite(sum(map(sum, gram))):  # NaN/inf anywhere (or a sum beyond 1e308)
        return None
    top = max(gram[i][i] for i in range(k))
    s = top if top > _TINY_SQRT else 1.0
    diag = [gram[i][i] / s for i in range(k)]
    d = [math.sqrt(x) if x > ZERO_ROW else 1.0 for x in diag]
    g_hat = [[gram[i][j] / s / (d[i] * d[j]) + (ridge if i == j else 0.0) for j in range(k)] for i in range(k)]
    return g_hat, d


_TINY_SQRT = math.sqrt(2.2250738585072014e-308)  # gram_scale's threshold for float64


def solve_dense(a: list[list[float]], b: list[float]) -> list[float] | None:
    """x with a x = b for a symmetric positive definite ``a`` (a ridged Ĝ_FF): Gaussian
    elimination without pivoting, stable for such matrices; None when a pivot is not positive
    (``a`` indefinite up to rounding: the torch solvers, with pivoting, take the problem)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        p = m[col]
        pivot = p[col]
        if not pivot > 0.0:
            return None
        tail = p[col:]
        for r in range(col + 1, n):
            f = m[r][col] / pivot
            if f:
                m[r][col:] = [x - f * y for x, y in zip(m[r][col:], tail)]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        row = m[i]
        x[i] = (row[n] - sum(map(mul, row[i + 1 : n], x[i + 1 :]))) / row[i]
    return x


def free_set_solution(g_hat: list[list[float]], c: list[float], free: list[bool]) -> list[float] | None:
    """y with y_A = c_A and Ĝ_FF y_F = −Ĝ_FA c_A (unclamped); None on a zero pivot."""
    f = [i for i, fi in enumerate(free) if fi]
    y = [0.0 if fi else ci for fi, ci in zip(free, c)]
    if f:
        rhs = [-sum(map(mul, g_hat[i], y)) for i in f]
        x = solve_dense([[g_hat[i][j] for j in f] for i in f], rhs)
        if x is None:
            return None
        for i, xi in zip(f, x):
            y[i] = xi
    return y


def pdas_host(g_hat, c: list[float], free: list[bool], tol: float, rounds: int) -> tuple[list[float], list[bool]] | None:
    """One problem's primal-dual active-set rounds (the rule of
    :func:`morl.solvers.dual_cone.pdas_steps`): ``(max(z, c), free)`` at the optimum, or None
    when ``rounds`` did not reach it."""
    cmax = max(map(abs, c))
    for _ in range(rounds):
        y = free_set_solution(g_hat, c, free)
        if y is None:
            return None
        mu = [sum(map(mul, row, y)) for row in g_hat]
        quad = sum(map(mul, y, mu))
        scale = max(cmax, math.sqrt(quad)) if quad > 0.0 else cmax
        lim, low = SLACK * scale, -tol * scale
        # the next free set: the free rows that are feasible, the active rows that want in;
        # it equals the current one exactly when y satisfies the KKT conditions
        nxt = [(yi >= ci - lim) if fi else (mi < low) for fi, yi, ci, mi in zip(free, y, c, mu)]
        if nxt == free:
            return [a if a > b else b for a, b in zip(y, c)], free
        free = nxt
    return None


def project_host(gram, u, ridge: float, tol: float, rounds: int, free_start=None) -> tuple[list[list[float]], list[list[bool]]] | None:
    """``(v, free)`` (lists, B × K) for the Gramian ``gram`` (K × K) and the right-hand sides
    ``u`` (B × K), or None (non-finite G, or a problem the rounds did not settle). The start
    is ``free_start`` (B × K bools) or, per problem, the rows whose multiplier at z = c is
    negative."""
    eq = equilibrated(gram, ridge)
    if eq is None:
        return None
    g_hat, d = eq
    k = len(d)
    out_v, out_free = [], []
    for b, row in enumerate(u):
        c = [row[i] * d[i] for i in range(k)]
        start = free_start[b] if free_start is not None else [sum(map(mul, row, c)) < 0 for row in g_hat]  # Ĝ symmetric
        found = pdas_host(g_hat, c, start, tol, rounds)
        if found is None:
            return None
        z, free = found
        out_v.append([z[i] / d[i] for i in range(k)])
        out_free.append(free)
    return out_v, out_free
