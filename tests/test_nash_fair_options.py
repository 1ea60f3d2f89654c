"""Nash-MTL's and FairGrad's options reach the α-fair solver, their weights come back in the
Gramian's dtype on every path, and FairGrad's α = 0 (no solve: equal weights) is the clipped
sum. The solver is checked against the authors' solvers in tests/test_nash_fair.py; these pin
the wiring, which mutation testing (docs/testing.md) found unpinned."""

import pytest
import torch

from morl.aggregators import build
from morl.aggregators import fairgrad as fairgrad_module
from morl.aggregators import nash_mtl as nash_module
from morl.solvers.alpha_fair import alpha_fair_solve
from morl.solvers.min_norm import ridge_for

MODULES = {"nash_mtl": nash_module, "fairgrad": fairgrad_module}


def _jacobian(seed: int, k: int, dtype=torch.float64) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    j = torch.randn(k, 4 * k, generator=gen, dtype=torch.float64) + 0.3 * torch.randn(1, 4 * k, generator=gen, dtype=torch.float64)
    return j.to(dtype)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_defaults_and_options_reach_the_solver(name, monkeypatch):
    """(α, max_iter, tol): FairGrad's α is its option (default 1), Nash-MTL's is 1 (Nash
    bargaining is the α = 1 case); max_iter 50 and tol 1e-8 by default."""
    seen = []
    real = MODULES[name].alpha_fair_solve

    def spy(gram, a, max_iter, tol, init=None):
        seen.append((a, max_iter, tol))
        return real(gram, a, max_iter, tol, init=init)

    monkeypatch.setattr(MODULES[name], "alpha_fair_solve", spy)
    j = _jacobian(0, 4)
    build(name)(j)
    custom = {"max_iter": 7, "tol": 1e-3} | ({"alpha": 2.0} if name == "fairgrad" else {})
    build(name, **custom)(j)
    assert seen == [(1.0, 50, 1e-8), (2.0 if name == "fairgrad" else 1.0, 7, 1e-3)]


@pytest.mark.parametrize("name, options", [("nash_mtl", {}), ("fairgrad", {}), ("fairgrad", {"alpha": 0.0})],
                         ids=["nash_mtl", "fairgrad", "fairgrad-alpha0"])
@pytest.mark.parametrize("batch", [(), (3,)], ids=["one", "batched"])
def test_weights_come_back_in_the_gramians_dtype_and_shape(name, options, batch):
    """Batched: each member's weights (solved and clipped on its own Gramian) equal a call on
    that Gramian alone, to float32 rounding."""
    js = [_jacobian(s, 4, torch.float32) for s in range(max(batch, default=1))]
    grams = torch.stack([j @ j.T for j in js]).reshape(*batch, 4, 4)
    w = build(name, **options).weights_from_gramian(grams)
    assert w.dtype == torch.float32 and w.shape == (*batch, 4)
    if batch:
        for i, j in enumerate(js):
            torch.testing.assert_close(w[i], build(name, **options).weights_from_gramian(j @ j.T), rtol=1e-5, atol=0)


def test_nash_warm_starts_from_its_last_alpha_and_reuses_it_on_schedule(monkeypatch):
    """Each solve starts from the previous α (the authors' warm start); a new K starts cold;
    with ``update_weights_every=2`` every second call reuses α, counted from the first call
    after ``reset()`` as from the first call ever."""
    inits = []
    real = nash_module.alpha_fair_solve

    def spy(gram, a, max_iter, tol, init=None):
        inits.append(None if init is None else init.clone())
        return real(gram, a, max_iter, tol, init=init)

    monkeypatch.setattr(nash_module, "alpha_fair_solve", spy)
    agg = build("nash_mtl")
    agg(_jacobian(0, 4))
    first = agg.alpha.clone()
    agg(_jacobian(1, 4))
    agg(_jacobian(2, 3))  # K changed: no start
    assert inits[0] is None and torch.equal(inits[1], first) and inits[2] is None
    inits.clear()
    agg = build("nash_mtl", update_weights_every=2)
    for _ in range(2):
        for s in range(4):
            agg(_jacobian(s, 4))
        agg.reset()
    assert len(inits) == 4  # calls 1 and 3 of each round solve, 2 and 4 reuse


def test_fairgrad_alpha_zero_is_the_clipped_sum():
    """α = 0 weighs every objective alike (the utilitarian end of α-fairness): K · (1/K) = 1
    each, so d = Σ_k g_k, clipped to ‖d‖ ≤ max_norm."""
    j = _jacobian(3, 5)
    total = j.sum(0)
    agg = build("fairgrad", alpha=0.0, max_norm=0.0)
    torch.testing.assert_close(agg(j), total, rtol=1e-12, atol=0)
    torch.testing.assert_close(agg.weights, torch.ones(5, dtype=torch.float64), rtol=0, atol=1e-15)
    clipped = build("fairgrad", alpha=0.0, max_norm=0.5)(j)
    torch.testing.assert_close(clipped, 0.5 * total / total.norm(), rtol=1e-12, atol=0)


def _member_grams() -> torch.Tensor:
    """Four 4×4 Gramians: two full-rank, one of rank 2, one Pareto-stationary (g₂ = −g₁)."""
    out = [_jacobian(s, 4) for s in range(2)]
    low = _jacobian(2, 4)
    out.append(torch.stack([low[0], low[1], low[0] + low[1], low[0] - low[1]]))
    flat = _jacobian(3, 4)
    out.append(torch.stack([flat[0], -flat[0], flat[2], flat[3]]))
    return torch.stack([j @ j.T for j in out])


@pytest.mark.parametrize("a", [1.0, 2.0])
def test_the_alpha_fair_solver_on_a_batch_is_each_member_alone(a):
    """One call on [4, K, K] with a per-member start ([4, K]: a usable one, zeros, NaN, ones;
    the solver uses a start only where it is positive and finite) gives each member's
    (w, converged, stationary) of a call on that member alone. Newton stops when every member
    is within tol, so a member may take a step more in the batch: weights agree to 1e-6
    relative (the residual tolerance is 1e-8); measured ≤ 9.1e-10."""
    grams = _member_grams()
    warm, _, _ = alpha_fair_solve(grams[0], a)
    inits = torch.stack([warm, torch.zeros(4, dtype=torch.float64), torch.full((4,), float("nan"), dtype=torch.float64),
                         torch.ones(4, dtype=torch.float64)])
    w, converged, stationary = alpha_fair_solve(grams, a, init=inits)
    assert w.shape == (4, 4) and converged.shape == (4,) and stationary.shape == (4,)
    for i in range(4):
        wi, ci, si = alpha_fair_solve(grams[i], a, init=inits[i])
        assert bool(ci) == bool(converged[i]) and bool(si) == bool(stationary[i]), i
        if not bool(si):  # at a Pareto-stationary member the optimum does not exist: the weights
            # grow without bound along the null combination (1e7 and more), and two runs stopped
            # at different steps differ there (MORL_TEST_SEED_OFFSET=1: 4.3e6 apart)
            assert (w[i] - wi).abs().max() <= 1e-6 * wi.abs().max(), i
    assert bool(stationary[3]) and not bool(stationary[:3].any())


def test_the_alpha_fair_solvers_defaults_are_nash():
    """Called with the Gramian alone: α = 1 (Nash bargaining), 50 Newton steps, tol 1e-8."""
    g = _member_grams()[0]
    default, explicit = alpha_fair_solve(g), alpha_fair_solve(g, 1.0, 50, 1e-8)
    for x, y in zip(default, explicit):
        assert torch.equal(x, y)


@pytest.mark.parametrize("a", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("share", [0.1, 0.3, 0.45, 0.55, 0.8])
@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_the_stationary_flag_is_the_ridges_share_of_the_condition(a, share, scale):
    """Two unit rows at cosine −c (a float32 Gramian, so ρ = ridge_for(float32)): by symmetry
    w₁ = w₂ = w with (1 − c + ρ) w = w^(−1/a), so w = (1 − c + ρ)^(−a/(a+1)) and the ridge's
    share of each row's condition, ρ w^(1 + 1/a), is ρ / (1 − c + ρ), set here by choosing c.
    The point is reported stationary exactly when that share is ≥ ½ (the module docstring's
    rule), whatever α and the Gramian's scale; near the line (share 0.45, 0.55) w is 1e3–1e6
    times a regular point's, so a wrong exponent in the rule moves the decision. The weights
    match the formula to 1e-9 relative (measured ≤ 3e-11)."""
    rho = ridge_for(torch.float32)
    c = torch.tensor(1.0 - rho * (1.0 - share) / share, dtype=torch.float32)
    one = torch.ones((), dtype=torch.float32)
    gram = torch.stack([torch.stack([one, -c]), torch.stack([-c, one])]) * scale
    g = gram.double()  # the float32-rounded entries, as the solver sees them
    norm2 = float(g[0, 0])
    gap = 1.0 + float(g[0, 1]) / norm2
    w_ref = ((gap + rho) * norm2) ** (-a / (a + 1.0))
    w, converged, stationary = alpha_fair_solve(gram, a)
    assert bool(stationary) == (rho / (gap + rho) >= 0.5)
    assert bool(converged)
    assert ((w.double() - w_ref).abs() <= 1e-9 * w_ref).all(), (w, w_ref)
