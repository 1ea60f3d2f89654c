"""morl.agents.federated.client.masked_accuracy on a padded client, against a count done by hand.

Clients are padded to a common length; only the first ``count`` rows are real. With a linear
classifier whose weights are the identity (θ = [I, 0]), the prediction of row x is argmax x, so
the expected accuracy is a plain count over the real rows.
"""

import torch

from morl.agents.federated.client import masked_accuracy
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
