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

The method runs as tensor code on every device: the active set is a mask and every branch a
``where``, at most ``max_iter`` steps; where reading a flag is free (the CPU) it stops as soon
as the problem is solved. Each step solves one system in the masked A_WW, so a conflicting
problem costs O(K⁴) over its ~K steps.

Tolerances, relative to the problem's own scale (so any gradient scale solves alike): a
constraint counts as met when its slack is ≥ −``tol``·max_j A_jj, and g_p as dependent on the
active gradients when ‖z‖² ≤ ``dependence_tol``·A_pp (this must exceed the Gramian's relative
rounding, or rounding makes dependent rows look independent, with huge multipliers).
"""

from __future__ import annotations

import torch

from morl.host_reads import reads_are_free

#: relative violation below which a constraint counts as met
TOL = 1e-9


def dual_terms(gram: torch.Tensor, taus: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(A = G_SS, b = τ ∘ diag(A) − G_S1) of the normalised Gramian ``gram`` ([K, K], row 0
    the primary objective) and the secondary objectives' ``taus`` ([K − 1])."""
    a = gram[1:, 1:]
    return a, taus * torch.diagonal(a) - gram[1:, 0]


def solve_masked(a: torch.Tensor, b: torch.Tensor, dependence_tol: float, max_iter: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(μ, feasible, converged) for ``a`` [n, n] and ``b`` [n] (float64, any device): one step
    (add the most violated constraint p, or drop the active one that blocks it) per iteration,
    ``max_iter`` iterations at most. Infeasible constraints give μ = 0 and feasible False;
    ``converged`` is False when the steps ran out first."""
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
    """(μ, active set, whether p was added, whether the step is unbounded) after one step
    towards adding constraint p: r = A_WW⁻¹ A_Wp, the full step −slack_p/‖z‖², the partial step
    to the first active multiplier that reaches 0 (which is then dropped)."""
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
