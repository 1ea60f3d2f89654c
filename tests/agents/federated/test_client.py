"""Client updates: padded-client reductions (masked accuracy and loss, the last epoch's mean loss),
the proximal default, pair sampling and last-epoch losses against hand loops."""

import math

import pytest
import torch

from morl.agents.federated import client as C
from morl.agents.federated.client import last_epoch_mean, masked_accuracy, masked_loss
from morl.agents.federated.model import FlatClassifier
from morl.agents.federated.model import build as build_model
from morl.envs.data import federated as fl_data
from tests.agents.federated.fl_fixtures import tiny_round


def test_accuracy_counts_only_the_real_rows():
    model = FlatClassifier(dim=3, num_classes=3)
    theta = torch.cat([torch.eye(3).reshape(-1), torch.zeros(3)])
    x = torch.tensor([[5.0, 0, 0], [0, 5, 0], [0, 0, 5], [5, 0, 0], [0, 5, 0], [0, 0, 5]])
    y = torch.tensor([0, 1, 0, 0, 2, 2])  # rows 0, 1, 3 right among the 4 real ones; padding rows 4, 5
    acc = masked_accuracy(model, theta, x, y, torch.tensor(4))
    assert abs(float(acc) - 3 / 4) < 1e-7
    # padding that happens to be right (row 5) must not count
    assert abs(float(masked_accuracy(model, theta, x, y, torch.tensor(5))) - 3 / 5) < 1e-7
    assert abs(float(masked_accuracy(model, theta, x, y, torch.tensor(3))) - 2 / 3) < 1e-7
    assert abs(float(masked_accuracy(model, theta, x, y, torch.tensor(1))) - 1.0) < 1e-7
    assert float(masked_accuracy(model, theta, x, y, torch.tensor(0))) == 0.0  # empty client: 0, not NaN


@pytest.mark.parametrize("count", [0, 1, 2, 4, 6])
def test_loss_is_the_mean_cross_entropy_of_the_real_rows(count):
    """With θ = [I, 0], row x's logits are x itself: the loss of row r is
    log Σ_c exp(x_rc) − x_r,y_r, averaged over the first ``count`` rows (0 for an empty client)."""
    model = FlatClassifier(dim=3, num_classes=3)
    theta = torch.cat([torch.eye(3).reshape(-1), torch.zeros(3)]).double()
    x = torch.tensor([[2.0, 0, 0], [0, 1, 0], [0, 0, 3], [1, 1, 0], [0, 4, 0], [3, 0, 1]], dtype=torch.float64)
    y = torch.tensor([0, 2, 2, 1, 0, 2])
    rows = [math.log(sum(math.exp(v) for v in x[r].tolist())) - float(x[r, y[r]]) for r in range(count)]
    expected = sum(rows) / count if count else 0.0
    assert abs(float(masked_loss(model, theta, x, y, torch.tensor(count))) - expected) < 1e-12


@pytest.mark.parametrize("count, batch, last", [(0, 4, 1), (1, 4, 1), (4, 4, 1), (5, 4, 2), (9, 4, 3), (40, 4, 5)])
def test_last_epoch_mean_averages_the_last_ceil_count_over_batch_steps(count, batch, last):
    """⌈count/batch⌉ steps make a local epoch (at least 1, as an empty client still steps on its
    padding; at most the 5 steps there are): the mean of that many trailing step losses."""
    step_losses = torch.tensor([1.0, 10.0, 100.0, 1000.0, 10000.0], dtype=torch.float64)
    expected = sum(step_losses.tolist()[-last:]) / last
    assert float(last_epoch_mean(step_losses, torch.tensor(count), batch)) == pytest.approx(expected, rel=1e-15)


def test_all_clients_update_defaults_to_no_proximal_term():
    # FedAvg's client step: without prox_mu the update is the prox_mu = 0 one (benchmarks rely on it)
    model, thetas, tr, noise = tiny_round()
    d0, l0 = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, 0.1)
    d1, l1 = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, 0.1, 0.0)
    d2, _ = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, 0.1, 1.0)
    assert torch.equal(d0, d1) and torch.equal(l0, l1) and not torch.equal(d0, d2)


def test_engine_trains_only_the_sampled_pairs():
    model, thetas, tr, noise = tiny_round()
    full_d, full_l = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, 0.1, 0.0, "last_epoch")
    mi, ci = torch.tensor([0, 2, 2, 1]), torch.tensor([3, 0, 1, 1])
    d, l = C.pairs_update(model, thetas, tr.x, tr.y, tr.count, noise, 0.1, 0.0, "last_epoch", mi, ci)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[mi, ci] = True
    torch.testing.assert_close(d[mask], full_d[mask], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(l[mask], full_l[mask], atol=1e-6, rtol=1e-5)
    assert bool((d[~mask] == 0).all()) and bool((l[~mask] == 0).all())


def test_last_epoch_loss_is_the_mean_minibatch_loss_of_the_last_epoch():
    data = fl_data.synthetic(0.5, 0.5, num_clients=1, samples_per_client=40, seed=1)  # 24 train samples
    model = build_model("logreg", data.dim, data.num_classes)
    thetas = model.init(2, torch.Generator().manual_seed(1))
    tr, steps, batch, lr = data.train, 7, 10, 0.1
    noise = C.round_noise(0, 0, 1, 2, steps, batch)[0]
    deltas, losses = C.client_update(model, thetas, tr.x[0], tr.y[0], tr.count[0], noise, lr, loss_source="last_epoch")
    count = int(tr.count[0])
    for j in range(2):  # by hand: plain SGD, record each minibatch loss before its step
        theta, rec = thetas[j].clone().requires_grad_(True), []
        for s in range(steps):
            idx = (noise[j, s] * count).long().clamp_max(tr.x.shape[1] - 1)
            loss = torch.nn.functional.cross_entropy(model.logits(theta, tr.x[0, idx]), tr.y[0, idx])
            (g,) = torch.autograd.grad(loss, theta)
            rec.append(loss.item())
            theta = (theta - lr * g).detach().requires_grad_(True)
        per_epoch = -(-count // batch)  # ⌈24/10⌉ = 3 steps per local epoch
        assert abs(float(losses[j]) - sum(rec[-per_epoch:]) / per_epoch) < 1e-5
        torch.testing.assert_close(deltas[j], thetas[j] - theta.detach(), atol=1e-6, rtol=1e-5)
    step_losses = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    assert float(C.last_epoch_mean(step_losses, torch.tensor(25), 10)) == 4.0  # last 3 steps
    assert float(C.last_epoch_mean(step_losses, torch.tensor(500), 10)) == 3.0  # capped at all 5
    with pytest.raises(ValueError, match="allowed: start, last_epoch"):
        C.client_update(model, thetas, tr.x[0], tr.y[0], tr.count[0], noise, lr, loss_source="end")
