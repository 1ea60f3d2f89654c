"""The QP of Priority-Constrained Descent (PCD, arXiv 2606.29521), d = argmin ½‖d − g₁‖² s.t.
g_jᵀd ≥ τ_j‖g_j‖², through its dual NNQP min_{μ ≥ 0} ½μᵀAμ − bᵀμ (d = g₁ + Σ_j μ_j g_j,
A = G_SS, b = τ ∘ diag(A) − G_S1), unbounded exactly when no d meets every constraint. Solved by
Goldfarb & Idnani's dual active-set method (Math. Programming 27, 1983): from μ = 0 add the most
violated constraint, dropping an active multiplier that reaches 0 first; the active set is a
mask, each branch a ``where``, tolerances relative.
"""

import torch

from morl.host_reads import reads_are_free

#: relative violation below which a constraint counts as met
TOL = 1e-9


def dual_terms(gram: torch.Tensor, taus: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(A = G_SS, b = τ ∘ diag(A) − G_S1) of the normalised Gramian (row 0 the primary)."""
    a = gram[1:, 1:]
    return a, taus * torch.diagonal(a) - gram[1:, 0]


def solve_masked(
    a: torch.Tensor, b: torch.Tensor, dependence_tol: float, max_iter: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(μ, feasible, converged) for ``a`` [n, n], ``b`` [n] (float64), at most ``max_iter`` steps.
    Infeasible constraints give μ = 0 and feasible False."""
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
        if early_exit and bool(done):
            break
        mu_next, active_next, added, unbounded = _masked_step(a, mu, active, p, slack_p, idx, eye, dependence_tol)
        stepping = ~done & ~unbounded
        infeasible = infeasible | (~done & unbounded)
        done = done | unbounded
        mu = torch.where(stepping, mu_next, mu)
        active = torch.where(stepping, active_next, active)
        pending = stepping & ~added
        if early_exit and bool(done):
            break
    else:  # the last step may have been the one that finished the problem
        slack = torch.where(active, 0.0, a @ mu - b)
        done = done | (~pending & (slack.min() >= -atol))
    return torch.where(infeasible, 0.0, mu.clamp_min(0.0)), ~infeasible, done


def _masked_step(a, mu, active, p, slack_p, idx, eye, dependence_tol):
    """(μ, active set, p added?, unbounded?) after one step towards adding p: r = A_WW⁻¹A_Wp,
    full step −slack_p/‖z‖² or the partial step to the first active μ reaching 0 (dropped)."""
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
