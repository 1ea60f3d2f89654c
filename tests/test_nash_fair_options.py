"""Nash-MTL's and FairGrad's options reach the α-fair solver, their weights come back in the
Gramian's dtype on every path, and FairGrad's α = 0 (no solve: equal weights) is the clipped
sum. The solver is checked against the authors' solvers in tests/test_nash_fair.py; these pin
the wiring, which mutation testing (docs/testing.md) found unpinned."""

import pytest
import torch

from morl.aggregators import build
from morl.aggregators import fairgrad as fairgrad_module
from morl.aggregators import nash_mtl as nash_module

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
    js = [_jacobian(s, 4, torch.float32) for s in range(max(batch, default=1))]
    grams = torch.stack([j @ j.T for j in js]).reshape(*batch, 4, 4)
    w = build(name, **options).weights_from_gramian(grams)
    assert w.dtype == torch.float32 and w.shape == (*batch, 4)


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
