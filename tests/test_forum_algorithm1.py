"""FORUM over several iterations against a plain transcription of Algorithm 1 of arXiv:2401.09257.

The transcription below works in numpy on a bilevel quadratic with closed-form gradients and
solves QP (11) with CVXPY; it shares no code with ``morl.bilevel`` (no autograd, no
``forum_direction``, no ``solve_qp``). Every iterate (α_k, ω_k) and the per-iteration state
(λ^k, λ̃^k, π, ν, the iteration counter, ω restored after the inner loop) must agree, so
dropping the λ momentum, resetting λ̃ between steps, a wrong β_k, a wrong sign in ∇q̃ or an
inner loop that does not warm-start as asked each fail.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import torch

from morl.bilevel import FORUM

N_ALPHA, N_OMEGA = 2, 3
K_ITERS, T_INNER, ETA, MU, RHO = 8, 4, 0.3, 0.2, 0.5
# Agreement of every iterate and state: measured largest difference 3.5e-11 (over the 4 cases
# below, 8 iterations each; CVXPY is asked for 1e-12 gaps). 1e-6 sits 4 orders above that and
# 5 orders below what the planted bugs change (λ̃ by > 0.1, see the regime checks).
TOL = 1e-6


class Quadratic:
    """f(α, ω) = ½(ω − Bα)ᵀH(ω − Bα) + ½c‖α‖²;  F_i(α, ω) = ½‖ω − b_i‖² + ½ s_i‖α − a_i‖²."""

    def __init__(self, m: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        q = rng.normal(size=(N_OMEGA, N_OMEGA))
        self.H = q @ q.T / N_OMEGA + 0.5 * np.eye(N_OMEGA)  # strongly convex lower level
        self.B = 0.5 * rng.normal(size=(N_OMEGA, N_ALPHA))
        self.c = 0.3
        self.b = 2.0 * rng.normal(size=(m, N_OMEGA))  # spread-out targets: conflicting objectives
        self.a = rng.normal(size=(m, N_ALPHA))
        self.s = rng.uniform(0.5, 1.5, size=m)

    # closed-form gradients (numpy, for the transcription)
    def grad_f(self, alpha, omega):
        r = self.H @ (omega - self.B @ alpha)
        return -self.B.T @ r + self.c * alpha, r

    def grad_F(self, alpha, omega):
        return np.concatenate([self.s[:, None] * (alpha - self.a), omega - self.b], axis=1)

    # the same functions in torch (for FORUM, which differentiates them itself)
    def torch_lower(self, alpha, omega):
        r = omega - torch.as_tensor(self.B) @ alpha
        return 0.5 * r @ torch.as_tensor(self.H) @ r + 0.5 * self.c * alpha @ alpha

    def torch_upper(self, alpha, omega):
        up = 0.5 * (omega - torch.as_tensor(self.b)).pow(2).sum(1)
        return up + 0.5 * torch.as_tensor(self.s) * (alpha - torch.as_tensor(self.a)).pow(2).sum(1)


def qp11(grad_F: np.ndarray, grad_q: np.ndarray, pi: np.ndarray, phi: float) -> np.ndarray:
    """λ^k of QP (11): min ½‖Σλ_i∇F_i + γ∇q̃‖² − γφ  s.t.  λ ∈ Δ, γ ≥ 0, γ ≥ λ·π."""
    m = grad_F.shape[0]
    lam, gamma = cp.Variable(m), cp.Variable()
    objective = 0.5 * cp.sum_squares(grad_F.T @ lam + gamma * grad_q) - gamma * phi
    constraints = [lam >= 0, cp.sum(lam) == 1, gamma >= 0, gamma >= pi @ lam]
    cp.Problem(cp.Minimize(objective), constraints).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return np.clip(lam.value, 0.0, None) / np.clip(lam.value, 0.0, None).sum()


def algorithm1(pb: Quadratic, alpha, omega, warm_start: bool) -> list[dict]:
    """Algorithm 1 line by line (λ̃^{-1} = 0, β_k = (k+1)^(−3/4), z_{k+1} = z_k + μ d_k)."""
    m = pb.b.shape[0]
    omega_0 = omega.copy()
    lam_tilde = np.zeros(m)  # line 2
    trace = []
    for k in range(K_ITERS):
        w = omega.copy() if warm_start else omega_0.copy()  # line 4
        for _ in range(T_INNER):  # lines 5-7
            w = w - ETA * pb.grad_f(alpha, w)[1]
        gf_alpha, gf_omega = pb.grad_f(alpha, omega)
        grad_q = np.concatenate([gf_alpha - pb.grad_f(alpha, w)[0], gf_omega])  # line 9
        grad_F = pb.grad_F(alpha, omega)  # line 10
        pi = RHO - grad_F @ grad_q / (grad_q @ grad_q)  # Eq. (9) with φ_k = ρ/2‖∇q̃‖²
        lam = qp11(grad_F, grad_q, pi, 0.5 * RHO * grad_q @ grad_q)  # line 11
        beta = (k + 1) ** -0.75
        lam_tilde = (1 - beta) * lam_tilde + beta * lam  # line 12
        nu = max(lam_tilde @ pi, 0.0)  # line 13
        d = -(lam_tilde @ grad_F + nu * grad_q)  # line 14
        alpha, omega = alpha + MU * d[:N_ALPHA], omega + MU * d[N_ALPHA:]  # line 15
        trace.append(dict(alpha=alpha, omega=omega, lam=lam, lam_tilde=lam_tilde, nu=nu, pi=pi))
    return trace


def _exercises_every_regime(pb, alpha0, omega0, ref, warm_start) -> bool:
    """The run exercises what the comparison is meant to catch (else it could pass vacuously)."""
    lam = np.array([e["lam"] for e in ref])
    lam_tilde = np.array([e["lam_tilde"] for e in ref])
    nus = np.array([e["nu"] for e in ref])
    return bool(
        np.abs(lam_tilde[1:] - lam[1:]).max() > 0.1  # momentum changes λ̃^k by > 1e5 · TOL
        and (lam > 1e-3).all(1).sum() >= 3  # QP (11) has interior solutions, not only vertices
        and (nus > 1e-3).any() and (nus == 0).any()  # both branches of ν = max(λ̃·π, 0)
        # ω̃^0 = ω_k vs ω_0 (line 4) matters here
        and np.abs(algorithm1(pb, alpha0, omega0, not warm_start)[-1]["omega"] - ref[-1]["omega"]).max() > 0.05
    )


def exercising_problem(m: int, warm_start: bool, tries: int = 200):
    """The first problem seed whose reference run exercises every regime above. A scan rather
    than a pinned seed, so that the check holds for any seeding (MORL_TEST_SEED_OFFSET): at
    seed offset 0, 5 of seeds 0..39 qualify for m = 2 and 2 for m = 3 (17 and 35), ~65 ms a try."""
    for seed in range(tries):
        pb = Quadratic(m, seed=seed)
        rng = np.random.default_rng(10 + seed)
        alpha0, omega0 = rng.normal(size=N_ALPHA), rng.normal(size=N_OMEGA)
        ref = algorithm1(pb, alpha0, omega0, warm_start)
        if _exercises_every_regime(pb, alpha0, omega0, ref, warm_start):
            return pb, alpha0, omega0, ref
    raise AssertionError(f"no problem among {tries} seeds exercises every regime (m={m})")


@pytest.mark.parametrize("warm_start", [True, False])
@pytest.mark.parametrize("m", [2, 3])  # m = 2: FORUM's closed-form QP; m = 3: its interior-point QP
def test_forum_iterates_match_algorithm1(m, warm_start):
    pb, alpha0, omega0, ref = exercising_problem(m, warm_start)

    a = torch.tensor(alpha0, requires_grad=True)
    w = torch.tensor(omega0, requires_grad=True)
    solver = FORUM([a], [w], lambda: pb.torch_upper(a, w), lambda: pb.torch_lower(a, w), inner_steps=T_INNER,
                   inner_lr=ETA, rho=RHO, lr=MU, beta_power=0.75, warm_start=warm_start)
    for k, expect in enumerate(ref):
        diag = solver.step()
        assert solver.k == k + 1
        for name in ("lam", "lam_tilde", "nu"):
            np.testing.assert_allclose(diag[name].numpy(), expect[name], rtol=0, atol=TOL, err_msg=f"{name} at k={k}")
        np.testing.assert_allclose(solver.lam_tilde.numpy(), expect["lam_tilde"], rtol=0, atol=TOL)  # carried state
        np.testing.assert_allclose(a.detach().numpy(), expect["alpha"], rtol=0, atol=TOL, err_msg=f"α at k={k}")
        np.testing.assert_allclose(w.detach().numpy(), expect["omega"], rtol=0, atol=TOL, err_msg=f"ω at k={k}")
