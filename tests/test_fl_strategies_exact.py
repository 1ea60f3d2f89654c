"""The plain-MGDA and linearization FL baselines against direct computations.

* ``mgda``: per model j, λ_j = argmin_{λ ∈ Δ_n} ‖Σ_i λ_i Δ_ji‖² (Désidéri's MGDA on the raw
  client deltas), update Σ_i λ_ji Δ_ji. The reference solves the simplex QP exactly by
  enumerating supports: on a support S the minimiser of λᵀGλ with Σλ = 1 is G_S⁻¹1 / 1ᵀG_S⁻¹1;
  the best feasible (λ ≥ 0) candidate is the optimum of this convex QP.
* ``fedmgda``: FedMGDA+ (Hu et al., arXiv 2006.11489): per model, λ = argmin λᵀĜλ over the simplex
  with |λ_i − 1/n| ≤ ε on the unit-normalised deltas, update Σ_i λ_i Δ_ji; the reference is
  quadprog (Goldfarb–Idnani) on the same box-constrained QP.
* ``linearization``: fixed convex weights w_j ∈ Δ_n per model, update Σ_i w_ji Δ_ji, the same
  weights every round.
"""

import itertools

import numpy as np
import pytest
import quadprog
import torch

from morl.agents.federated import strategies as S


def simplex_min_norm_exact(gram: torch.Tensor) -> torch.Tensor:
    n = gram.shape[0]
    best, best_val = None, float("inf")
    for r in range(1, n + 1):
        for support in itertools.combinations(range(n), r):
            idx = list(support)
            g = gram[idx][:, idx]
            try:
                x = torch.linalg.solve(g, torch.ones(r, dtype=gram.dtype))
            except RuntimeError:  # singular face: a smaller support covers it
                continue
            if x.sum() <= 0:
                continue
            lam = torch.zeros(n, dtype=gram.dtype)
            lam[idx] = x / x.sum()
            if (lam >= -1e-12).all() and (val := float(lam @ gram @ lam)) < best_val:
                best, best_val = lam.clamp_min(0), val
    return best


def test_mgda_update_is_the_exact_min_norm_point_per_model():
    # 3 models × 4 clients × 5 parameters; the deltas share a common component so the optimum
    # mixes interior and zero weights (checked below), not a vertex of the simplex.
    gen = torch.Generator().manual_seed(0)
    deltas = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64) + torch.tensor([1.0, 0.5, 0, 0, 0], dtype=torch.float64)
    update = S.MGDA().aggregate(deltas, torch.zeros(3, 4, dtype=torch.float64), torch.ones(4))
    assert update.shape == (3, 5) and update.dtype == torch.float64
    supports = []
    for j in range(3):
        lam = simplex_min_norm_exact(deltas[j] @ deltas[j].T)
        supports.append(int((lam > 1e-9).sum()))
        torch.testing.assert_close(update[j], lam @ deltas[j], rtol=0, atol=1e-6)
    assert max(supports) > 1  # at least one model mixes several clients


def test_mgda_two_clients_closed_form():
    # n = 2: λ₁ = clip(((Δ₂ − Δ₁)·Δ₂) / ‖Δ₁ − Δ₂‖², 0, 1); one model interior, one clipped.
    d = torch.tensor(
        [[[1.0, 0.0], [0.0, 1.0]],  # orthogonal: λ = (½, ½)
         [[1.0, 0.0], [3.0, 1.0]]],  # Δ₁ already the min-norm point: λ = (1, 0)
        dtype=torch.float64,
    )
    update = S.MGDA().aggregate(d, torch.zeros(2, 2, dtype=torch.float64), torch.ones(2))
    for j in range(2):
        a, b = d[j]
        lam1 = float(((b - a) @ b) / ((a - b) @ (a - b)))
        lam1 = min(max(lam1, 0.0), 1.0)
        torch.testing.assert_close(update[j], lam1 * a + (1 - lam1) * b, rtol=0, atol=1e-6)


def test_linearization_weights_are_fixed_convex_and_per_model():
    strat = S.Linearization(num_models=3, num_clients=5, seed=4)
    # Client i's delta is the basis vector e_i, so the update of model j IS its weight row.
    basis = torch.eye(5, dtype=torch.float64).expand(3, 5, 5)
    w = strat.aggregate(basis, torch.zeros(3, 5), torch.ones(5))
    assert w.dtype == torch.float64 and w.shape == (3, 5)
    assert (w > 0).all()
    # the weights are drawn in float32, so their sum is 1 to float32 rounding
    torch.testing.assert_close(w.sum(1), torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-6)
    assert not torch.allclose(w[0], w[1])  # each model its own mixture
    assert (w.max(1).values - w.min(1).values > 0.02).all()  # not the uniform FedAvg weights
    torch.testing.assert_close(strat.aggregate(basis, None, None), w, rtol=0, atol=0)  # fixed across rounds
    # the update is linear in the deltas with exactly those weights
    gen = torch.Generator().manual_seed(1)
    deltas = torch.randn(3, 5, 7, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(strat.aggregate(deltas, None, None), torch.einsum("ji,jip->jp", w, deltas), rtol=0, atol=1e-12)
    # same seed, same weights; another seed, other weights; sample counts play no part
    again = S.Linearization(num_models=3, num_clients=5, seed=4).aggregate(basis, None, torch.arange(1, 6))
    torch.testing.assert_close(again, w, rtol=0, atol=0)
    other = S.Linearization(num_models=3, num_clients=5, seed=5).aggregate(basis, None, None)
    assert not torch.allclose(other, w)


def _box_simplex_qp(gram: np.ndarray, lo: float, hi: float) -> np.ndarray:
    # quadprog: min ½xᵀGx − aᵀx s.t. Cᵀx ≥ b, the first meq rows equalities (Σλ = 1, λ ≥ lo, −λ ≥ −hi)
    n = gram.shape[0]
    constraints = np.hstack([np.ones((n, 1)), np.eye(n), -np.eye(n)])
    bounds = np.concatenate([[1.0], np.full(n, lo), np.full(n, -hi)])
    return quadprog.solve_qp(0.5 * (gram + gram.T), np.zeros(n), constraints, bounds, 1)[0]


@pytest.mark.parametrize("n", [3, 5, 8])
@pytest.mark.parametrize("eps", [0.05, 0.2, 1.0])
def test_fedmgda_weights_are_the_box_constrained_min_norm_point(n, eps):
    """8 models (one call) × n clients whose deltas share a component (so the box binds for
    small ε and a simplex face for large ε), norms differing. 300 projected-gradient steps
    give updates within 1e-6 of quadprog's (relative to the largest delta entry; measured ≤ 6.5e-8
    over 4 seeds of each (n, ε), 288 problems); the update is
    Σ λ_i Δ_i with the RAW deltas."""
    gen = torch.Generator().manual_seed(10 * n + int(100 * eps))
    m, p = 8, 20
    deltas = torch.randn(m, n, p, generator=gen, dtype=torch.float64) + 0.5 * torch.randn(m, 1, p, generator=gen, dtype=torch.float64)
    deltas = deltas * torch.rand(m, n, 1, generator=gen, dtype=torch.float64)
    lo, hi = max(0.0, 1.0 / n - eps), min(1.0, 1.0 / n + eps)
    update = S.FedMGDA(eps).aggregate(deltas, None, torch.ones(n))
    for j in range(m):
        unit = deltas[j] / deltas[j].norm(dim=-1, keepdim=True)
        lam = torch.from_numpy(_box_simplex_qp((unit @ unit.T).numpy(), lo, hi))
        assert (update[j] - lam @ deltas[j]).abs().max() <= 1e-6 * deltas[j].abs().max(), j
