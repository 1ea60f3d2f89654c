"""FORUM (Ye et al., arXiv:2401.09257): the λ subproblem (QP 11), the direction's properties, the
first-order constraint gradient, the synthetic problem of Eq. 24, bilevel quadratics with known
solutions, and its iterates against a plain transcription of Algorithm 1."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import torch

from morl.bilevel import FORUM, forum_direction
from morl.problems.forum_synthetic import FIG2_INITS, BilevelQuadratic, Eq24Problem, ParetoQuadratic


def _random_case(gen, m, dim, spread=2.0):
    scales = 10 ** (torch.rand(m, 1, generator=gen, dtype=torch.float64) * 2 * spread - spread)
    upper = torch.randn(m, dim, generator=gen, dtype=torch.float64) * scales
    gq = torch.randn(dim, generator=gen, dtype=torch.float64) * 10 ** (torch.rand(1, generator=gen).item() * 4 - 3)
    return upper, gq


def _qp11_value(upper, gq, rho, lam):
    """Eq. (10): ½‖Σλ∇F + ν(λ)∇q̃‖² − ν(λ)φ with ν(λ) = max(λ·π, 0), π_i = ρ − ⟨∇q̃, ∇F_i⟩/‖∇q̃‖²."""
    pi = rho - upper @ gq / (gq @ gq)
    nu = (lam @ pi).clamp_min(0)
    return 0.5 * (lam @ upper + nu[..., None] * gq).pow(2).sum(-1) - nu * 0.5 * rho * (gq @ gq)


# -- the λ subproblem (QP 11) ----------------------------------------------------------------------
@pytest.mark.parametrize("m", [2, 3, 5])
def test_qp11_matches_cvxpy(gen, m):
    for _ in range(6):
        upper, gq = _random_case(gen, m, 8)
        rho = 0.5
        out = forum_direction(upper, gq, rho, qp="ipm")
        L = torch.cat([upper, gq[None]]).numpy()
        pi, phi = out.pi.numpy(), 0.5 * rho * float(gq @ gq)
        lam, gamma = cp.Variable(m), cp.Variable()
        objective = 0.5 * cp.sum_squares(L[:m].T @ lam + gamma * L[m]) - gamma * phi
        cp.Problem(cp.Minimize(objective), [lam >= 0, cp.sum(lam) == 1, gamma >= 0, gamma >= pi @ lam]).solve(
            solver=cp.CLARABEL
        )
        ours = float(_qp11_value(upper, gq, rho, out.lam))
        ref = float(_qp11_value(upper, gq, rho, torch.as_tensor(lam.value)))
        assert ours <= ref + 1e-7 * max(1.0, abs(ref)), (ours, ref)
        assert abs(out.lam.sum().item() - 1) < 1e-12 and out.lam.min() >= 0
        # The QP's γ is ν(λ) = max(λ·π, 0) at the optimum (this makes the paper's (10) and (11) equivalent).
        gap = abs(out.gamma.item() - max(0.0, float(out.lam @ out.pi))) * gq.norm().item()
        assert gap <= 1e-6 * upper.norm(dim=1).max().item()


def test_qp11_equals_grid_search_of_eq10(gen):
    """For m = 2, λ from QP (11) (closed form and interior point) is the argmin of Eq. (10) on a fine grid.
    Measured over seeds 0-19 (MORL_TEST_SEED): the closed form never above the grid's best value;
    the interior point, which stays strictly inside the simplex, up to 1.0e-9 above (bound 1e-8,
    was 1e-9: seed 2 failed); both within 2.5e-5 of the grid's λ (bound 2e-3)."""
    t = torch.linspace(0, 1, 20001, dtype=torch.float64)
    grid = torch.stack([t, 1 - t], 1)
    for _ in range(20):
        upper, gq = _random_case(gen, 2, 7, spread=1.0)
        rho = [0.1, 0.5, 0.9][int(torch.randint(3, (1,), generator=gen))]
        best = grid[_qp11_value(upper, gq, rho, grid).argmin()]
        for qp in ("auto", "ipm"):
            out = forum_direction(upper, gq, rho, qp=qp)
            slack = 1e-8 if qp == "ipm" else 1e-9
            assert float(_qp11_value(upper, gq, rho, out.lam)) <= float(_qp11_value(upper, gq, rho, best)) + slack
            assert (out.lam - best).abs().max() < 2e-3


def test_closed_form_and_interior_point_agree_on_degenerate_inputs():
    e = torch.eye(3, dtype=torch.float64)
    cases = [
        (torch.stack([e[0], e[0]]), e[1]),  # identical upper gradients
        (torch.stack([e[0], -e[0]]), e[0]),  # opposite; ∇q̃ colinear with one of them
        (torch.stack([e[0], 2 * e[1]]), 1e-9 * e[2]),  # tiny constraint gradient
        (torch.stack([1e8 * e[0], 1e-8 * e[1]]), e[0] + e[1]),  # extreme scales
    ]
    for upper, gq in cases:
        a, b = forum_direction(upper, gq, 0.5), forum_direction(upper, gq, 0.5, qp="ipm")
        va, vb = float(_qp11_value(upper, gq, 0.5, a.lam)), float(_qp11_value(upper, gq, 0.5, b.lam))
        assert torch.isfinite(a.descent).all() and torch.isfinite(b.descent).all()
        scale = max(upper.pow(2).sum(1).max().item(), gq.pow(2).sum().item())  # the QP's units
        assert abs(va - vb) <= 1e-9 * scale and va <= vb + 1e-12 * scale


# -- properties of the direction ------------------------------------------------------------------
def test_barrier_identity(gen):
    """ν > 0 ⇒ ⟨∇q̃, d⟩ = −ρ‖∇q̃‖² (Alg. 1's 2φ_k); ν = 0 ⇒ ⟨∇q̃, d⟩ ≤ −ρ‖∇q̃‖²."""
    seen = set()
    for m in (1, 2, 3):
        for _ in range(20):
            upper, gq = _random_case(gen, m, 6, spread=1.0)
            out = forum_direction(upper, gq, 0.5)
            inner = -(gq @ out.descent).item()  # ⟨∇q̃, d⟩ with d = −descent
            target = -0.5 * (gq @ gq).item()
            if out.nu > 0:
                assert inner == pytest.approx(target, rel=1e-9, abs=1e-12)
            else:
                assert inner <= target + 1e-12
            seen.add(bool(out.nu > 0))
    assert seen == {True, False}


def test_zero_constraint_gradient_reduces_to_mgda(gen):
    from morl.aggregators import build

    for m in (2, 3, 6):
        upper = torch.randn(m, 9, generator=gen, dtype=torch.float64)
        out = forum_direction(upper, torch.zeros(9, dtype=torch.float64), rho=0.5, qp="ipm" if m == 2 else "auto")
        mgda = build("mgda")
        direction = mgda(upper)
        assert torch.allclose(out.lam, mgda.weights.to(out.lam), atol=1e-5)
        assert torch.allclose(out.descent, direction, atol=1e-6)
        assert torch.allclose(out.descent, out.lam_tilde @ upper)  # ν∇q̃ = 0


def test_momentum_and_single_objective(gen):
    upper, gq = _random_case(gen, 3, 5, spread=0.5)
    first = forum_direction(upper, gq, 0.5)  # λ̃^{-1} = 0, β_0 = 1 ⇒ λ̃^0 = λ^0
    assert torch.equal(first.lam_tilde, first.lam)
    prev = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    second = forum_direction(upper, gq, 0.5, lam_prev=prev, beta=0.25)
    assert torch.allclose(second.lam_tilde, 0.75 * prev + 0.25 * second.lam)
    assert second.lam_tilde.sum().item() == pytest.approx(1.0) and second.lam_tilde.min() >= 0
    assert second.nu == (second.lam_tilde @ second.pi).clamp_min(0)  # ν recomputed from λ̃, not the QP's γ
    # m = 1: λ ≡ 1 and d = −(∇F + max(π, 0)∇q̃), i.e. BOME's step with its η = ρ.
    one = forum_direction(upper[:1], gq, 0.5)
    pi = 0.5 - (upper[0] @ gq) / (gq @ gq)
    assert torch.allclose(one.descent, upper[0] + pi.clamp_min(0) * gq)


def test_bad_arguments_name_what_is_wrong():
    g = torch.ones(2, 3)
    with pytest.raises(ValueError, match="constraint_grad"):
        forum_direction(g, torch.ones(4), 0.5)
    with pytest.raises(ValueError, match="rho"):
        forum_direction(g, torch.ones(3), -1.0)
    with pytest.raises(ValueError, match="beta"):
        forum_direction(g, torch.ones(3), 0.5, beta=0.0)
    a, w = torch.zeros(1, requires_grad=True), torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="inner_steps"):
        FORUM([a], [w], lambda: w, lambda: w.sum(), inner_steps=0)


# -- the first-order constraint gradient ----------------------------------------------------------
def test_constraint_gradient_is_first_order_and_converges_in_T(gen):
    """∇_ω q̃ = ∇_ω f; the α-block approaches the true ∇_α q (Danskin) as T grows (Lemma A.1)."""
    pb = BilevelQuadratic.random(3, 4, generator=gen)
    alpha = torch.randn(3, generator=gen, dtype=torch.float64).requires_grad_(True)
    omega = torch.randn(4, generator=gen, dtype=torch.float64).requires_grad_(True)
    omega_before = omega.detach().clone()
    # q = f(α, ω) − f*(α) with f* ≡ 0, so ∇q = ∇f; finite differences of f confirm it.
    true_alpha_grad = -(pb.A.T @ (omega - pb.A @ alpha)).detach()
    errors = []
    for T in (2, 8, 32):
        solver = FORUM(
            [alpha],
            [omega],
            lambda: pb.upper(alpha, omega),
            lambda: pb.lower(alpha, omega),
            inner_steps=T,
            inner_lr=0.5,
        )
        g = solver.gradients((), ())
        gq = g["constraint_grad"]
        assert torch.allclose(gq[3:], (omega - pb.A @ alpha).detach())  # ω-block: ∇_ω f
        errors.append((gq[:3] - true_alpha_grad).norm().item())
        assert torch.equal(omega.detach(), omega_before)  # the inner loop restores ω_k
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-8
    eps = 1e-6
    fd = torch.stack(
        [
            (pb.lower(alpha + eps * e, omega) - pb.lower(alpha - eps * e, omega)) / (2 * eps)
            for e in torch.eye(3, dtype=torch.float64)
        ]
    )
    assert torch.allclose(fd.detach(), true_alpha_grad, atol=1e-6)


# -- the synthetic problem of the paper (Eq. 24) --------------------------------------------------
def _run_eq24(alpha0, omega0, rho, iterations):
    pb = Eq24Problem()
    a = torch.tensor([alpha0], dtype=torch.float64, requires_grad=True)
    w = torch.tensor(omega0, dtype=torch.float64, requires_grad=True)
    solver = FORUM(
        [a], [w], lambda: pb.upper(a, w), lambda: pb.lower(a, w), inner_steps=50, inner_lr=0.05, rho=rho, lr=0.3
    )
    for _ in range(iterations):
        diag = solver.step()
    a, w = a.detach(), w.detach()
    return pb.distance(a, w).item(), pb.q(a, w).item(), pb.kkt(a, w, diag["lam_tilde"], diag["nu"]).item(), a.item()


@pytest.mark.parametrize(
    "alpha0,omega0", [FIG2_INITS[0], *(pytest.param(*start, marks=pytest.mark.integration) for start in FIG2_INITS[1:])]
)
def test_eq24_reaches_optimal_set(alpha0, omega0):
    """μ = 0.3, η = 0.05, T = 50, ρ = 0.3, β_k = (k+1)^(−3/4), K = 300 (Ye et al., arXiv:2401.09257, App. C,
    Eq. (24), Fig. 2): ℰ, q and 𝒦 → 0.

    A loose pass mark would be ℰ < 1e-3; the exact λ QP gets far below it (measured ℰ ≤ 1.3e-10).
    """
    dist, q, kkt, c = _run_eq24(alpha0, omega0, rho=0.3, iterations=300)
    assert dist < 1e-6 and q < 1e-12 and kkt < 1e-12
    assert 1.0 - 1e-3 <= c <= 2.0 + 1e-3  # α = ω_1 = ω_2 = c with c ∈ [1, 2] (approached from outside)


@pytest.mark.parametrize("alpha0,omega0", FIG2_INITS)
def test_eq24_without_barrier_stalls_infeasible(alpha0, omega0):
    """ρ = 0 only asks ⟨∇q̃, d⟩ ≤ 0: the iterates stall at infeasible points (a negative control)."""
    dist, q, _, _ = _run_eq24(alpha0, omega0, rho=0.0, iterations=40)
    assert dist > 0.3 and q > 0.05


# -- bilevel quadratics with known solutions ------------------------------------------------------
def _run_quadratic(pb, n, p, mu, iterations, rho=0.5, T=50, eta=0.5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(n, generator=gen, dtype=torch.float64).requires_grad_(True)
    w = torch.randn(p, generator=gen, dtype=torch.float64).requires_grad_(True)
    solver = FORUM(
        [a], [w], lambda: pb.upper(a, w), lambda: pb.lower(a, w), inner_steps=T, inner_lr=eta, rho=rho, lr=mu
    )
    for _ in range(iterations):
        solver.step()
    return a.detach(), w.detach()


@pytest.mark.integration  # long runs
def test_single_objective_quadratic_bias_scales_with_step():
    """m = 1 (plain BLO): FORUM settles within O(μ) of α* (Lemma B.2(a)); halving μ halves the error."""
    pb = BilevelQuadratic.random(3, 4, generator=torch.Generator().manual_seed(0))
    alpha_star, _ = pb.solution()
    errors = []
    for mu in (0.08, 0.04):
        a, w = _run_quadratic(pb, 3, 4, mu, iterations=int(12 / mu), T=10)
        errors.append((a - alpha_star).norm().item())
        assert (w - pb.A @ a).norm() < 5 * mu  # the LL gap is O(μ) too
    assert errors[1] < 0.06
    assert 0.35 <= errors[1] / errors[0] <= 0.65, errors


@pytest.mark.integration  # long runs
def test_three_objective_quadratic_reaches_pareto_set():
    """F_i = ½‖ω − b_i‖², f = ½‖ω − α‖²: FORUM ends at α = ω inside conv{b_i}."""
    gen = torch.Generator().manual_seed(1)
    pb = ParetoQuadratic(torch.randn(3, 5, generator=gen, dtype=torch.float64))
    a, w = _run_quadratic(pb, 5, 5, mu=0.1, iterations=200, T=15)
    assert (a - w).norm() < 1e-3
    assert pb.hull_distance(w) < 1e-3


# -- robustness -----------------------------------------------------------------------------------
def test_nonfinite_objective_raises_or_skips():
    a = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    bad_upper = lambda: torch.stack([w.sum() * float("nan"), w.sum()])  # noqa: E731
    lower = lambda: (w - a).pow(2).sum()  # noqa: E731
    with pytest.raises(ValueError, match="not finite"):
        FORUM([a], [w], bad_upper, lower, inner_steps=2).step()
    solver = FORUM([a], [w], bad_upper, lower, inner_steps=2, check_finite="skip")
    solver.step()
    assert torch.equal(w.detach(), torch.zeros(2, dtype=torch.float64)) and solver.nonfinite_steps.item() == 1


def test_a_restored_forum_takes_the_same_next_step():
    pb = Eq24Problem()

    def make():
        a = torch.tensor([0.0], dtype=torch.float64, requires_grad=True)
        w = torch.tensor([0.0, 3.0], dtype=torch.float64, requires_grad=True)
        return (
            a,
            w,
            FORUM([a], [w], lambda: pb.upper(a, w), lambda: pb.lower(a, w), inner_steps=5, inner_lr=0.05, rho=0.3),
        )

    a1, w1, s1 = make()
    for _ in range(3):
        s1.step()
    a2, w2, s2 = make()
    with torch.no_grad():
        a2.copy_(a1)
        w2.copy_(w1)
    s2.load_state_dict(s1.state_dict())
    d1, d2 = s1.step(), s2.step()
    assert torch.equal(d1["lam_tilde"], d2["lam_tilde"]) and torch.equal(w1, w2)


# -- several iterations against a plain transcription of Algorithm 1 ---------------------------
# The transcription works in numpy on a bilevel quadratic with closed-form gradients and solves
# QP (11) with CVXPY; it shares no code with morl.bilevel (no autograd, no forum_direction, no
# solve_qp). Every iterate (α_k, ω_k) and the per-iteration state (λ^k, λ̃^k, π, ν, the iteration
# counter, ω restored after the inner loop) must agree, so dropping the λ momentum, resetting λ̃
# between steps, a wrong β_k, a wrong sign in ∇q̃ or an inner loop that does not warm-start as
# asked each fail.
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
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12
    )
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
        and (nus > 1e-3).any()
        and (nus == 0).any()  # both branches of ν = max(λ̃·π, 0)
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


# m = 2: FORUM's closed-form QP; m = 3: its interior-point QP. The other two pairs in the integration tier.
@pytest.mark.parametrize(
    "m, warm_start",
    [
        (2, True),
        (3, False),
        pytest.param(2, False, marks=pytest.mark.integration),
        pytest.param(3, True, marks=pytest.mark.integration),
    ],
)
def test_forum_iterates_match_algorithm1(m, warm_start):
    pb, alpha0, omega0, ref = exercising_problem(m, warm_start)

    a = torch.tensor(alpha0, requires_grad=True)
    w = torch.tensor(omega0, requires_grad=True)
    solver = FORUM(
        [a],
        [w],
        lambda: pb.torch_upper(a, w),
        lambda: pb.torch_lower(a, w),
        inner_steps=T_INNER,
        inner_lr=ETA,
        rho=RHO,
        lr=MU,
        beta_power=0.75,
        warm_start=warm_start,
    )
    for k, expect in enumerate(ref):
        diag = solver.step()
        assert solver.k == k + 1
        for name in ("lam", "lam_tilde", "nu"):
            np.testing.assert_allclose(diag[name].numpy(), expect[name], rtol=0, atol=TOL, err_msg=f"{name} at k={k}")
        np.testing.assert_allclose(solver.lam_tilde.numpy(), expect["lam_tilde"], rtol=0, atol=TOL)  # carried state
        np.testing.assert_allclose(a.detach().numpy(), expect["alpha"], rtol=0, atol=TOL, err_msg=f"α at k={k}")
        np.testing.assert_allclose(w.detach().numpy(), expect["omega"], rtol=0, atol=TOL, err_msg=f"ω at k={k}")
