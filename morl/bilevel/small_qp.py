"""A dense primal-dual interior-point solver for the tiny convex QPs of multi-gradient methods.

    min_x ½ xᵀPx + qᵀx   s.t.   A x = b,   G x ≤ h

FORUM's direction subproblem (Eq. 11) has m+1 variables and m+2 inequalities, so every
Newton system is a few-by-few dense solve. The solver runs a fixed number of Mehrotra
predictor-corrector iterations with masked updates once converged, so it never reads a value
back to the host and works unchanged on CPU and CUDA (a CVXPY call would force a sync and a
numpy round trip at every upper-level step).
"""

from __future__ import annotations

import torch

__all__ = ["solve_qp"]


def _step_to_boundary(v: torch.Tensor, dv: torch.Tensor) -> torch.Tensor:
    # Largest a in (0, 1] with v + a·dv ≥ 0 (v > 0 componentwise).
    ratios = torch.where(dv < 0, -v / dv, torch.full_like(v, float("inf")))
    return ratios.amin().clamp(max=1.0)


def solve_qp(
    P: torch.Tensor,
    q: torch.Tensor,
    A: torch.Tensor,
    b: torch.Tensor,
    G: torch.Tensor,
    h: torch.Tensor,
    *,
    iters: int = 40,
    tol: float = 1e-12,
    reg: float = 1e-12,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Solve the QP above; returns ``(x, z)`` (primal solution, multipliers of the row-normalised inequalities).

    All arguments are float tensors on one device; the solve runs in float64. ``P`` must be
    symmetric positive semi-definite; on CPU the loop stops at convergence, on an accelerator it
    runs all ``iters`` iterations with masked updates. ``reg`` adds ``reg·trace(P)/n`` to its diagonal so a
    singular ``P`` (colinear gradients) still gives a unique Newton step. The iteration stops
    improving once the duality measure falls below ``tol`` (masked, no host sync).
    """
    n = P.shape[0]
    p_eq, m_in = A.shape[0], G.shape[0]
    dtype, dev = torch.float64, P.device
    P = 0.5 * (P + P.T).to(dtype)
    P = P + reg * (torch.diagonal(P).sum() / n + 1.0) * torch.eye(n, dtype=dtype, device=dev)
    q, A, b, G, h = (t.to(dtype) for t in (q, A, b, G, h))
    # Row scaling leaves the feasible set unchanged and keeps the Newton systems balanced.
    g_norm = G.abs().amax(dim=1).clamp_min(torch.finfo(dtype).tiny)
    G, h = G / g_norm[:, None], h / g_norm
    a_norm = A.abs().amax(dim=1).clamp_min(torch.finfo(dtype).tiny)
    A, b = A / a_norm[:, None], b / a_norm

    x = torch.zeros(n, dtype=dtype, device=dev)
    y = torch.zeros(p_eq, dtype=dtype, device=dev)
    s = torch.ones(m_in, dtype=dtype, device=dev)
    z = torch.ones(m_in, dtype=dtype, device=dev)
    zeros_pp = torch.zeros(p_eq, p_eq, dtype=dtype, device=dev)

    on_device = dev.type != "cpu"
    for _ in range(iters):
        r_d = P @ x + q + A.T @ y + G.T @ z
        r_eq = A @ x - b
        r_in = G @ x + s - h
        mu = (s @ z) / m_in
        w = z / s
        kkt = torch.cat([torch.cat([P + G.T @ (w[:, None] * G), A.T], 1), torch.cat([A, zeros_pp], 1)], 0)
        lu = torch.linalg.lu_factor_ex(kkt)[:2]  # _ex: no error check, so no host sync

        def newton(r_c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
            rhs = torch.cat([-r_d - G.T @ ((z * r_in - r_c) / s), -r_eq])
            sol = torch.linalg.lu_solve(*lu, rhs[:, None])[:, 0]
            dx, dy = sol[:n], sol[n:]
            ds = -r_in - G @ dx
            dz = -(r_c + z * ds) / s
            return dx, dy, ds, dz

        # Predictor (affine scaling), then Mehrotra's centring + second-order correction.
        dx, dy, ds, dz = newton(s * z)
        a_aff = _step_to_boundary(torch.cat([s, z]), torch.cat([ds, dz]))
        mu_aff = ((s + a_aff * ds) @ (z + a_aff * dz)) / m_in
        sigma = (mu_aff / mu.clamp_min(torch.finfo(dtype).tiny)).clamp(0.0, 1.0) ** 3
        dx, dy, ds, dz = newton(s * z + ds * dz - sigma * mu)
        a = 0.99 * _step_to_boundary(torch.cat([s, z]), torch.cat([ds, dz]))

        res = torch.maximum(r_eq.abs().amax(), r_in.abs().amax()) if p_eq else r_in.abs().amax()
        done = (mu < tol) & (res < tol)
        if not on_device and bool(done):
            break  # reading a CPU tensor costs no device sync, so stop as soon as converged
        ok = torch.isfinite(torch.cat([dx, dy, ds, dz])).all() & ~done
        a = torch.where(ok, a, torch.zeros_like(a))
        dx, dy, ds, dz = (torch.nan_to_num(t) for t in (dx, dy, ds, dz))
        x, y, s, z = x + a * dx, y + a * dy, s + a * ds, z + a * dz
        # Keep strictly interior: a fully converged pair can round to exactly 0.
        tiny = torch.finfo(dtype).tiny
        s, z = s.clamp_min(tiny), z.clamp_min(tiny)
    return x, z
