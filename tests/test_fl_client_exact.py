"""morl.agents.federated.client's padded-client reductions (masked accuracy and loss, the
last local epoch's mean loss) against counts and sums done by hand.

Clients are padded to a common length; only the first ``count`` rows are real. With a linear
classifier whose weights are the identity (θ = [I, 0]), the prediction of row x is argmax x, so
the expected accuracy is a plain count over the real rows.
"""

import torch

import math

import pytest

from morl.agents.federated.client import last_epoch_mean, masked_accuracy, masked_loss
from morl.agents.federated.model import FlatClassifier


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
