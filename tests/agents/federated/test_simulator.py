"""A federated round (clients, then the server) against a plain per-client loop written here (float64, no autograd, no vmap).

* client (FedAvg and FedProx, arXiv:1812.06127 eq. 2): minibatch SGD on the local objective
  ``F_k(w) + μ/2 ‖w − w_global‖²``; F_k = mean cross-entropy of multinomial logistic regression,
  whose gradient is written out: ``∂/∂W = xᵀ(softmax(xW + b) − onehot(y)) / B``.
  The minibatch rows are the client's convention: ``floor(u · count)`` for the round's uniforms u.
* FedAvg server (arXiv:1602.05629 Algorithm 1): ``w ← Σ_k (n_k / n) w_k``, n_k = train samples.
  FedProx's server is the same average (full participation).
* FedMGDA+ server (arXiv:2006.11489, as described in docs/federated.md): λ = argmin ‖Σ λ_i Δ̂_i‖²
  over the simplex with ``|λ_i − 1/n| ≤ ε`` (Δ̂ = unit-norm client updates), solved here exactly by
  enumerating the active sets; the update is ``Σ λ_i Δ_i``.
"""

import itertools

import numpy as np
import pytest
import torch

from morl.agents.federated import client as C
from morl.agents.federated import strategies as S
from morl.agents.federated.simulator import Federation, InProcessEngine, LocalConfig
from tests.agents.federated.fl_fixtures import uneven_round

LR, STEPS, BATCH = 0.1, 6, 5


# μ large enough that the proximal pull changes ‖Δ‖ by 8-21% over 6 steps (measured)
PROX_MU = 0.5


def _logreg(theta, x, num_classes):
    d = x.shape[1]
    return x @ theta[: d * num_classes].reshape(d, num_classes) + theta[d * num_classes :]


def _ce_and_grad(theta, x, y, num_classes):
    """Mean cross-entropy of multinomial logistic regression and its gradient, written out."""
    logits = _logreg(theta, x, num_classes)
    logp = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    onehot = torch.nn.functional.one_hot(y, num_classes).to(theta.dtype)
    resid = (logp.exp() - onehot) / x.shape[0]
    return -(logp * onehot).sum(1).mean(), torch.cat([(x.T @ resid).reshape(-1), resid.sum(0)])


def _hand_client(theta_global, x, y, count, noise, lr, mu, num_classes):
    """One (model, client) pair: plain SGD on F_k(w) + μ/2‖w − w_global‖², one step per minibatch.

    Returns the local model and the minibatch objective before each step.
    """
    w0 = theta_global.double()
    w, values = w0.clone(), []
    x, c = x.double(), int(count)
    for u in noise:
        # the client's row choice; float32 product as in the client, so the same rows are picked
        idx = [min(int(np.float32(v) * np.float32(c)), x.shape[0] - 1) for v in u.tolist()]
        ce, g = _ce_and_grad(w, x[idx], y[idx], num_classes)
        values.append(float(ce + 0.5 * mu * ((w - w0) ** 2).sum()))
        w = w - lr * (g + mu * (w - w0))
    return w, values


def _hand_round(model, thetas, tr, noise, lr, mu):
    """Local models ``[m, n, P]`` and full local losses at the global models ``[m, n]`` by a loop."""
    m, n = thetas.shape[0], tr.x.shape[0]
    local = torch.zeros(m, n, thetas.shape[1], dtype=torch.float64)
    start = torch.zeros(m, n, dtype=torch.float64)
    for j in range(m):
        for i in range(n):
            local[j, i] = _hand_client(
                thetas[j], tr.x[i], tr.y[i], tr.count[i], noise[i, j], lr, mu, model.num_classes
            )[0]
            c = int(tr.count[i])
            start[j, i] = _ce_and_grad(thetas[j].double(), tr.x[i, :c].double(), tr.y[i, :c], model.num_classes)[0]
    return local, start


def _box_simplex_qp(gram: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """argmin λᵀGλ over {Σλ = 1, lo ≤ λ ≤ hi} by enumerating which coordinates sit at lo / hi / inside.

    G is positive definite here (n unit vectors in general position in P > n dimensions), so the
    minimiser is unique: the KKT point of its own active set, the best feasible candidate.
    """
    n = gram.shape[0]
    best, best_val = None, np.inf
    for pattern in itertools.product((lo, hi, None), repeat=n):
        free = [i for i, p in enumerate(pattern) if p is None]
        lam = np.array([0.0 if p is None else p for p in pattern])
        if free:
            fixed = [i for i in range(n) if i not in free]
            k = len(free)
            kkt = np.zeros((k + 1, k + 1))
            kkt[:k, :k], kkt[:k, k], kkt[k, :k] = gram[np.ix_(free, free)], -1.0, 1.0
            rhs = np.concatenate([-gram[np.ix_(free, fixed)] @ lam[fixed], [1.0 - lam[fixed].sum()]])
            lam[free] = np.linalg.solve(kkt, rhs)[:k]
        if abs(lam.sum() - 1) > 1e-9 or lam.min() < lo - 1e-12 or lam.max() > hi + 1e-12:
            continue
        val = lam @ gram @ lam
        if val < best_val:
            best, best_val = lam, val
    return best


def _hand_fedmgda(deltas: torch.Tensor, eps: float) -> torch.Tensor:
    """Update ``[m, P]``: per model, exact box-simplex min-norm λ of the unit deltas, then Σ λ_i Δ_i."""
    out = []
    for d in deltas.double():
        n = d.shape[0]
        unit = d / d.norm(dim=1, keepdim=True)
        lam = _box_simplex_qp((unit @ unit.T).numpy(), max(0.0, 1 / n - eps), min(1.0, 1 / n + eps))
        out.append(torch.from_numpy(lam) @ d)
    return torch.stack(out)


@pytest.mark.parametrize("mu", [0.0, PROX_MU])
def test_client_updates_equal_the_per_client_sgd_loop(mu):
    model, thetas, data, noise = uneven_round(STEPS, BATCH)
    tr = data.train
    local, start = _hand_round(model, thetas, tr, noise, LR, mu)
    hand_deltas = thetas.double().unsqueeze(1) - local
    # measured max error 6e-8 (deltas) and 3e-7 (losses) against deltas of norm 0.6-0.9
    deltas, losses = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, LR, mu)
    torch.testing.assert_close(deltas.double(), hand_deltas, rtol=0, atol=1e-5)
    torch.testing.assert_close(losses.double(), start, rtol=1e-5, atol=1e-6)
    d1, l1 = C.client_update(model, thetas, tr.x[1], tr.y[1], tr.count[1], noise[1], LR, mu)
    torch.testing.assert_close(d1.double(), hand_deltas[:, 1], rtol=0, atol=1e-5)
    mi, ci = torch.tensor([0, 2, 1]), torch.tensor([3, 0, 2])
    dp, _ = C.pairs_update(model, thetas, tr.x, tr.y, tr.count, noise, LR, mu, "start", mi, ci)
    torch.testing.assert_close(dp[mi, ci].double(), hand_deltas[mi, ci], rtol=0, atol=1e-5)


def test_the_proximal_term_pulls_the_local_model_back_to_the_global_one():
    """FedProx: ‖Δ‖ shrinks with μ, and the hand loop's μ-dependence is what the client computes."""
    model, thetas, data, noise = uneven_round(STEPS, BATCH)
    tr = data.train
    plain = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, LR, 0.0)[0].double()
    prox = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, LR, PROX_MU)[0].double()
    hand_plain = thetas.double().unsqueeze(1) - _hand_round(model, thetas, tr, noise, LR, 0.0)[0]
    hand_prox = thetas.double().unsqueeze(1) - _hand_round(model, thetas, tr, noise, LR, PROX_MU)[0]
    # the proximal correction itself (8-21% of ‖Δ‖) matches, not only the totals
    torch.testing.assert_close(prox - plain, hand_prox - hand_plain, rtol=0, atol=2e-5)
    assert bool((prox.norm(dim=-1) < plain.norm(dim=-1)).all())
    assert float(((plain - prox).norm(dim=-1) / plain.norm(dim=-1)).min()) > 0.05


def test_last_epoch_losses_are_the_hand_loops_minibatch_objectives():
    model, thetas, data, noise = uneven_round(STEPS, BATCH)
    tr = data.train
    _, losses = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, LR, 0.0, "last_epoch")
    for j in range(3):
        for i in range(4):
            values = _hand_client(thetas[j], tr.x[i], tr.y[i], tr.count[i], noise[i, j], LR, 0.0, model.num_classes)[1]
            per_epoch = min(-(-int(tr.count[i]) // BATCH), STEPS)  # ⌈count / batch⌉ steps, at most all of them
            assert abs(float(losses[j, i]) - np.mean(values[-per_epoch:])) < 1e-5


def _one_round(strategy, mu):
    model, thetas, data, _ = uneven_round(STEPS, BATCH)
    fed = Federation(model, data, strategy, num_models=3, seed=0)
    engine = InProcessEngine(model, data, LocalConfig(lr=LR, steps=STEPS, batch_size=BATCH, prox_mu=mu), seed=0)
    before = fed.thetas.clone()
    fed.run_round(engine)
    noise = C.round_noise(0, 0, 4, 3, STEPS, BATCH)  # the engine's draw for (seed 0, round 0)
    local, _ = _hand_round(model, before, data.train, noise, LR, mu)
    return before, fed.thetas, local, data.train.count


@pytest.mark.parametrize("strategy, mu", [(S.FedAvg(), 0.0), (S.FedProx(), PROX_MU)])
def test_fedavg_and_fedprox_round_is_the_size_weighted_average_of_local_models(strategy, mu):
    before, after, local, count = _one_round(strategy, mu)
    weights = count.double() / count.sum()  # n_k / n = [18, 5, 11, 2] / 36
    expect = torch.zeros_like(before, dtype=torch.float64)
    for k in range(4):
        expect += weights[k] * local[:, k]
    torch.testing.assert_close(after.double(), expect, rtol=0, atol=1e-5)
    # the plain mean of the local models is far from it (unequal counts)
    assert float((local.mean(1) - expect).abs().max()) > 1e-2


def test_fedmgda_aggregation_is_the_exact_box_constrained_min_norm_combination():
    gen = torch.Generator().manual_seed(0)
    # Δ_i = common direction + client noise: correlated like client updates, still full rank
    common = torch.randn(2, 1, 12, generator=gen, dtype=torch.float64)
    deltas = common + 0.8 * torch.randn(2, 5, 12, generator=gen, dtype=torch.float64)
    deltas = deltas * torch.linspace(0.5, 3.0, 5, dtype=torch.float64).view(1, 5, 1)  # unequal norms
    sizes = torch.tensor([1, 1, 2, 2, 4])
    # ε = 0.05 and 0.12: λ sits at both box bounds (e.g. [.15 .25 .25 .15 .2]); ε = 1: the plain
    # simplex, λ_i = 0 for some clients. (ε = 0 -> uniform weights is in test_strategies.py.)
    for eps in (0.05, 0.12, 1.0):
        hand = _hand_fedmgda(deltas, eps)
        # projected gradient (300 steps) vs the exact solution: measured max error 2.6e-7 (ε = 1),
        # 1e-15 otherwise, on updates of norm 1-10
        torch.testing.assert_close(S.FedMGDA(eps).aggregate(deltas, None, sizes), hand, rtol=0, atol=5e-6)
    # the box matters: the ε = 0.05 and ε = 1 solutions differ
    assert float((_hand_fedmgda(deltas, 0.05) - _hand_fedmgda(deltas, 1.0)).abs().max()) > 0.1


def test_fedmgda_round_against_the_hand_loop():
    eps = 0.1
    before, after, local, _ = _one_round(S.FedMGDA(eps), 0.0)
    deltas = before.double().unsqueeze(1) - local
    expect = before.double() - _hand_fedmgda(deltas, eps)
    torch.testing.assert_close(after.double(), expect, rtol=0, atol=1e-5)
    # these deltas are nearly orthogonal (Gram eigenvalues 0.92-1.08), so λ is close to uniform,
    # yet the plain mean of the deltas is 4e-3 away: 400x the tolerance
    assert float((expect - (before.double() - deltas.mean(1))).abs().max()) > 1e-3
