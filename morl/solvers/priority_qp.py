"""The quadratic program of Priority-Constrained Descent (PCD), solved on the Gramian.

With g₁ the primary gradient and g₂..g_K the secondary ones (already normalised by the
caller), PCD's direction is

    d = argmin_d ½‖d − g₁‖²   s.t.   g_jᵀd ≥ τ_j‖g_j‖²   (j = 2..K)

(Varam et al., "Not All Objectives Are Born Equal: Priority-Constrained Descent for
Hierarchical Multi-Objective Optimization", TMLR 2026, arXiv 2606.29521). Its KKT conditions
give d = g₁ + Σ_j μ_j g_j with multipliers μ ≥ 0, so with S = the secondary rows, A = G_SS
and b = τ ∘ diag(A) − G_S1 every quantity is a Gramian product:

    slack_j = g_jᵀd − τ_j‖g_j‖² = (Aμ − b)_j ≥ 0,   μ ≥ 0,   μ_j · slack_j = 0,

the optimality conditions of the non-negative QP min_{μ ≥ 0} ½μᵀAμ − bᵀμ (its dual). A
may be singular (dependent secondary gradients); then the dual can be unbounded, which is
exactly when no d satisfies every constraint (Farkas: a y ≥ 0 with Jᵀ_S y = 0 and bᵀy > 0).

The solver is the dual active-set method of Goldfarb & Idnani ("A numerically stable dual
method for solving strictly convex quadratic programs", Math. Programming 27, 1983), whose
Hessian here is the identity: it starts from the unconstrained minimiser d = g₁ (μ = 0) and
adds one violated constraint p at a time. The primal step is z = the part of g_p orthogonal
to the active gradients (‖z‖² = A_pp − A_pW A_WW⁻¹ A_Wp), the dual step raises μ_p and lowers
the active μ_W by r = A_WW⁻¹ A_Wp. The full step −slack_p/‖z‖² makes p active; an active
multiplier that reaches 0 first is dropped and p is tried again. When z = 0 (g_p depends on
the active gradients) and no multiplier blocks, the step is unbounded: infeasible.

Three forms of the same method:

* :func:`solve_host`: Python floats, for one small CPU Gramian (K ≤ 16: a torch op on a K×K
  tensor costs ~3 µs of dispatch, a whole Python iteration at K = 10 about as much);
* :func:`solve_masked`: torch, batched-free but branch-free (the active set as a mask, every
  step a ``where``), a fixed number of iterations: any device, ``torch.compile``; on the CPU
  it stops as soon as it is done;
* before it, on the CPU, :func:`pdas_rounds`: primal-dual active-set rounds (Hintermüller,
  Ito & Kunisch, SIAM J. Optim. 13(3), 2003) that guess the active set from the slacks and
  certify the guess by the KKT conditions, one Cholesky solve a round. Random or mildly
  conflicting gradients settle in one or two rounds, where the one-constraint-at-a-time
  method needs K − 1 iterations; an uncertified guess (or a singular A) leaves the problem
  to the masked method.

Tolerances, relative to the problem's own scale (so any gradient scale solves alike): a
constraint counts as met when its slack is ≥ −``tol``·max_j A_jj, and g_p as dependent on the
active gradients when ‖z‖² ≤ ``dependence_tol``·A_pp (this must exceed the Gramian's relative
rounding, or rounding makes dependent rows look independent, with huge multipliers).
"""

from __future__ import annotations

import math

import torch

from morl.host_reads import reads_are_free

#: relative violation below which a constraint counts as met
TOL = 1e-9
#: PDAS rounds tried first on the CPU (0 turns them off). On the conflicting problems of
#: tests/test_pcd.py (K = 6..24, 360 of them) 4 rounds certified 265, 6 rounds 353, 8 all; a
#: round is ~15 small ops, where the masked method takes ~K steps of ~30
PDAS_ROUNDS = 8


def dual_terms(gram: torch.Tensor, taus: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(A = G_SS, b = τ ∘ diag(A) − G_S1) of the normalised Gramian ``gram`` ([K, K], row 0
    the primary objective) and the secondary objectives' ``taus`` ([K − 1])."""
    a = gram[1:, 1:]
    return a, taus * torch.diagonal(a) - gram[1:, 0]


def solve_host(a: list[list[float]], b: list[float], dependence_tol: float, max_iter: int) -> tuple[list[float] | None, bool]:
    """(μ, converged) for the Python lists ``a`` (A) and ``b``; μ is None when the constraints
    are infeasible. ``converged`` is False when ``max_iter`` steps (a guard against cycling
    from rounding) ran out: μ is then the last (dual feasible) iterate."""
    n = len(b)
    atol = TOL * max([a[j][j] for j in range(n)] + [math.ulp(0.0)])
    mu, active, steps = [0.0] * n, [], 0
    while True:
        slack = [_dot(a[j], mu) - b[j] for j in range(n)]
        for j in active:  # active constraints hold with equality (up to rounding)
            slack[j] = 0.0
        p = min(range(n), key=slack.__getitem__)
        if slack[p] >= -atol:
            return mu, True
        if steps >= max_iter:
            return [max(m, 0.0) for m in mu], False
        while steps < max_iter:  # add p, dropping blocking constraints first
            steps += 1
            r, full, partial, k = _host_step(a, mu, active, p, _dot(a[p], mu) - b[p], dependence_tol)
            step = min(full, partial)
            if step == math.inf:
                return None, True
            for j, rj in zip(active, r):
                mu[j] -= step * rj
            mu[p] += step
            if full <= partial:
                active.append(p)
                break
            mu[active[k]] = 0.0
            del active[k]


def _host_step(a, mu, active, p, slack_p, dependence_tol) -> tuple[list[float], float, float, int]:
    """(r = A_WW⁻¹ A_Wp, the full step, the partial step, the index in ``active`` that blocks
    it) for adding constraint p with slack ``slack_p`` < 0."""
    r = _cholesky_solve([[a[i][j] for j in active] for i in active], [a[j][p] for j in active])
    z_sq = a[p][p] - sum(a[p][j] * rj for j, rj in zip(active, r))
    full = -slack_p / z_sq if z_sq > dependence_tol * a[p][p] else math.inf
    partial, k = math.inf, -1
    for i, (j, rj) in enumerate(zip(active, r)):
        if rj > 0.0 and mu[j] / rj < partial:
            partial, k = mu[j] / rj, i
    return r, full, partial, k


def _dot(x: list[float], y: list[float]) -> float:
    return sum(u * v for u, v in zip(x, y))


def _cholesky_solve(m: list[list[float]], rhs: list[float]) -> list[float]:
    """m⁻¹ rhs for the symmetric positive definite ``m`` (the active gradients' Gramian: the
    method adds only gradients independent of the active ones, so it is definite)."""
    n = len(rhs)
    low = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1):
            s = m[i][j] - sum(low[i][t] * low[j][t] for t in range(j))
            low[i][j] = math.sqrt(max(s, 0.0)) if i == j else (s / low[j][j] if low[j][j] > 0.0 else 0.0)
    y = [0.0] * n
    for i in range(n):
        y[i] = (rhs[i] - sum(low[i][t] * y[t] for t in range(i))) / low[i][i] if low[i][i] > 0.0 else 0.0
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (y[i] - sum(low[t][i] * x[t] for t in range(i + 1, n))) / low[i][i] if low[i][i] > 0.0 else 0.0
    return x


def solve(a: torch.Tensor, b: torch.Tensor, dependence_tol: float, max_iter: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(μ, feasible, converged) as float64 [n] and two 0-d bools, for the tensors ``a`` [n, n]
    and ``b`` [n] (float64) on any device: PDAS rounds first where reads are free, then the
    masked method for what they leave."""
    if PDAS_ROUNDS and reads_are_free(a):
        mu = pdas_rounds(a, b, PDAS_ROUNDS, dependence_tol)
        if mu is not None:
            true = torch.ones((), dtype=torch.bool)
            return mu, true, true
    return solve_masked(a, b, dependence_tol, max_iter)


def pdas_rounds(a: torch.Tensor, b: torch.Tensor, rounds: int, dependence_tol: float) -> torch.Tensor | None:
    """μ certified optimal by the KKT conditions (μ ≥ 0, every slack ≥ −atol, μ_j = 0 off the
    guessed active set), or None. Each round solves A_WW μ_W = b_W on the guess W, starting
    from the constraints that d = g₁ violates, then keeps the rows of W with μ > 0 and adds
    the rows outside it with negative slack. A guess whose gradients are dependent (a
    Cholesky pivot L_jj² ≤ ``dependence_tol``·A_jj: the squared part of g_j orthogonal to the
    earlier ones, the test of :func:`solve_host`) is left to the masked method: rounding
    would make its solve look definite, with huge multipliers. CPU only (it reads flags)."""
    n = b.shape[0]
    atol = TOL * torch.diagonal(a).max().clamp_min(torch.finfo(a.dtype).tiny)
    active = b > atol  # slack at μ = 0 is −b
    eye = torch.eye(n, dtype=a.dtype)
    for _ in range(rounds):
        both = active.unsqueeze(-1) & active.unsqueeze(-2)
        factor, info = torch.linalg.cholesky_ex(torch.where(both, a, eye))
        if info.item() or bool((active & (torch.diagonal(factor).square() <= dependence_tol * torch.diagonal(a))).any()):
            return None  # dependent gradients in the guess: the masked method decides
        mu = torch.cholesky_solve(torch.where(active, b, 0.0).unsqueeze(-1), factor).squeeze(-1)
        slack = a @ mu - b
        kept = active & (mu > 0)
        entering = ~active & (slack < -atol)
        if bool((mu >= 0).all()) and bool((slack >= -atol).all()):
            return mu
        active = kept | entering
    return None


def solve_masked(a: torch.Tensor, b: torch.Tensor, dependence_tol: float, max_iter: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`solve_host` with the active set as a mask and every branch a ``where``: one step
    (add p, or drop the constraint that blocks it) per iteration, ``max_iter`` iterations at
    most, no host read but the CPU's early exit. (μ, feasible, converged); infeasible problems
    return μ = 0."""
    n = b.shape[0]
    idx = torch.arange(n, device=a.device)
    eye = torch.eye(n, dtype=a.dtype, device=a.device)
    atol = TOL * torch.diagonal(a).max().clamp_min(torch.finfo(a.dtype).tiny)
    mu = torch.zeros_like(b)
    active = torch.zeros(n, dtype=torch.bool, device=a.device)
    pending = done = infeasible = torch.zeros((), dtype=torch.bool, device=a.device)
    p = torch.zeros((), dtype=torch.long, device=a.device)
    early_exit = reads_are_free(a)
    for _ in range(max_iter):
        slack = torch.where(active, 0.0, a @ mu - b)
        p = torch.where(pending, p, slack.argmin())
        slack_p = slack.gather(0, p.view(1)).squeeze(0)
        done = done | (~pending & (slack_p >= -atol))
        mu_next, active_next, added, unbounded = _masked_step(a, mu, active, p, slack_p, idx, eye, dependence_tol)
        stepping = ~done & ~unbounded
        infeasible = infeasible | (~done & unbounded)
        done = done | unbounded
        mu = torch.where(stepping, mu_next, mu)
        active = torch.where(stepping, active_next, active)
        pending = stepping & ~added
        if early_exit and bool(done):
            break
    # one more look: the last step may have been the one that finished the problem
    slack = torch.where(active, 0.0, a @ mu - b)
    done = done | (~pending & (slack.min() >= -atol))
    return torch.where(infeasible, 0.0, mu.clamp_min(0.0)), ~infeasible, done


def _masked_step(a, mu, active, p, slack_p, idx, eye, dependence_tol):
    """(μ, active set, whether p was added, whether the step is unbounded) after one step of
    adding constraint p: the branch-free form of :func:`_host_step` and its update."""
    col = a.index_select(1, p.view(1)).squeeze(1)
    both = active.unsqueeze(-1) & active.unsqueeze(-2)
    r = torch.linalg.solve(torch.where(both, a, eye), torch.where(active, col, 0.0))  # 0 off W
    a_pp = col.gather(0, p.view(1)).squeeze(0)
    z_sq = a_pp - col @ r
    independent = z_sq > dependence_tol * a_pp
    full = torch.where(independent, -slack_p / torch.where(independent, z_sq, 1.0), torch.inf)
    ratios = torch.where(active & (r > 0), mu / torch.where(r > 0, r, 1.0), torch.inf)
    partial, k = ratios.min(0)
    step = torch.minimum(full, partial)
    unbounded = torch.isinf(step)
    step = torch.where(unbounded, 0.0, step)
    added = full <= partial
    at_p, at_k = idx == p, idx == k
    mu_next = mu - step * r + torch.where(at_p, step, 0.0)
    mu_next = torch.where(at_k & ~added, 0.0, mu_next)
    active_next = torch.where(added, active | at_p, active & ~at_k)
    return mu_next, active_next, added, unbounded
