"""The dual-cone QP of :mod:`morl.solvers.dual_cone` for small CPU problems, in Python floats.

    z = argmin_{z ≥ c} zᵀĜz,   Ĝ = D⁻¹(G / max G_kk)D⁻¹ + ρI,   c = Du   (as there)

At K = 2..10 with few right-hand sides a torch solve is ~40 tensor operations of 2-3 µs
each, almost all of it dispatch: 0.2 ms against ~0.05 ms for TorchJD's compiled quadprog. On
the CPU the Gramian is in host memory, so reading it costs no synchronisation, and the same
primal-dual active-set rounds (Hintermüller, Ito & Kunisch, SIAM J. Optim. 13(3), 2003) run on
Python lists: a K×K Gaussian elimination per round, a few µs at K ≤ 5; B > 1 problems from
K = 6 on (UPGrad's) solve each round's B systems as one batched Cholesky solve on CPU tensors
made from the lists (:func:`pdas_batched`). Anything the rounds do not settle (cycling on a degenerate problem, a zero pivot, non-finite input) returns None and
the torch solvers take the whole problem.
"""

from __future__ import annotations

import math
from itertools import chain
from operator import mul

import torch

from morl.host_reads import cpu_tensor
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
#: From this K on, B > 1 problems (UPGrad's K) run their rounds batched (:func:`pdas_batched`):
#: Python eliminations cost ~K³/3 multiply-adds each, a batched torch round a dozen ops.
#: UPGrad's weights from a warm start, µs (1 thread, D = 1e4 Gaussian rows), batched / Python:
#: K = 5 63 / 54, K = 6 69 / 73, K = 7 76 / 93, K = 8 84 / 161, K = 10 106 / 181.
BATCH_MIN_K = 6


def equilibrated(gram: list[list[float]], ridge: float) -> tuple[list[list[float]], list[float]] | None:
    """(Ĝ, d) as :func:`morl.solvers.min_norm.equilibrate` of G / gram_scale(G); None when
    G has a non-finite entry."""
    k = len(gram)
    if not math.isfinite(sum(map(sum, gram))):  # NaN/inf anywhere (or a sum beyond 1e308)
        return None
    top = max(gram[i][i] for i in range(k))
    s = top if top > _TINY_SQRT else 1.0
    d = [math.sqrt(x) if x > ZERO_ROW else 1.0 for x in (gram[i][i] / s for i in range(k))]
    # Ĝ_ij = G_ij r_i r_j with r_i = 1 / (d_i sqrt(s)): one product per entry, not two
    # divisions (a third of a K = 10 DualProj call went here); the same values to a few ulps
    r = [1.0 / (x * math.sqrt(s)) for x in d]
    g_hat = [[x * ri * rj for x, rj in zip(row, r)] for row, ri in zip(gram, r)]
    for i in range(k):
        g_hat[i][i] += ridge
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
        nxt = _next_free(free, y, c, mu, sum(map(mul, y, mu)), cmax, tol)
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
    cs = [[a * b for a, b in zip(row, d)] for row in u]
    starts = free_start if free_start is not None else [[sum(map(mul, r, c)) < 0 for r in g_hat] for c in cs]  # Ĝ symmetric
    if len(cs) > 1 and k >= BATCH_MIN_K:
        found = pdas_batched(g_hat, cs, starts, tol, rounds)
    else:
        found = [pdas_host(g_hat, c, start, tol, rounds) for c, start in zip(cs, starts)]
    if found is None or None in found:
        return None
    return [[zi / di for zi, di in zip(z, d)] for z, _ in found], [free for _, free in found]


def pdas_batched(g_hat, cs: list[list[float]], starts: list[list[bool]], tol: float, rounds: int):
    """:func:`pdas_host` for B problems sharing Ĝ, each round's B free-set solves as one
    batched Cholesky solve (masked: identity rows where a row is active, so z_A = c_A
    exactly). At K = B = 10 the Python eliminations took 120 µs of a 300 µs UPGrad call; a
    batched round's dozen torch ops take ~35 µs (the KKT tests stay in Python). The rule, the stopping test and the refusals
    (a non-positive pivot: Ĝ_FF not positive definite) are :func:`pdas_host`'s. A list of
    ``(max(z, c), free)`` or None."""
    k = len(g_hat)
    g = cpu_tensor(chain.from_iterable(g_hat), torch.float64).view(k, k)
    eye = torch.eye(k, dtype=torch.float64)
    c_all = cpu_tensor(chain.from_iterable(cs), torch.float64).view(-1, k)
    out: list = [None] * len(cs)
    todo, free = list(range(len(cs))), [list(f) for f in starts]
    cmax = [max(map(abs, c)) for c in cs]
    for _ in range(rounds):
        c = c_all if len(todo) == len(cs) else c_all[todo]
        f = cpu_tensor(chain.from_iterable(free[b] for b in todo), torch.bool).view(-1, k)
        rhs = torch.where(f, -(torch.where(f, 0.0, c) @ g), c)  # Ĝ_FF z_F = −Ĝ_FA c_A; z_A = c_A
        chol, info = torch.linalg.cholesky_ex(torch.where(f.unsqueeze(-1) & f.unsqueeze(-2), g, eye))
        if any(info.tolist()):
            return None
        y = torch.cholesky_solve(rhs.unsqueeze(-1), chol).squeeze(-1)
        mu = y @ g
        left = []
        for b, yb, mb, qb in zip(todo, y.tolist(), mu.tolist(), (y * mu).sum(-1).tolist()):
            nxt = _next_free(free[b], yb, cs[b], mb, qb, cmax[b], tol)
            if nxt == free[b]:
                out[b] = ([a if a > x else x for a, x in zip(yb, cs[b])], free[b])
            else:
                free[b] = nxt
                left.append(b)
        if not left:
            return out
        todo = left
    return None


def _next_free(free: list[bool], y: list[float], c: list[float], mu: list[float], quad: float, cmax: float, tol: float) -> list[bool]:
    """The primal-dual active-set rule: the free rows that are feasible, the active rows whose
    multiplier is below −tol (both relative to the problem's scale); it equals ``free``
    exactly when y satisfies the KKT conditions."""
    scale = max(cmax, math.sqrt(quad)) if quad > 0.0 else cmax
    lim, low = SLACK * scale, -tol * scale
    return [(yi >= ci - lim) if fi else (mi < low) for fi, yi, ci, mi in zip(free, y, c, mu)]
