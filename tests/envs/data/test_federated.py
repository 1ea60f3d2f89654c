"""The federated data sets: the Synthetic(α, β) generator of the FedProx paper and the Dirichlet label split."""

import numpy as np
import pytest
import torch

from morl.envs.data import federated as fl_data


def test_synthetic_generator_shapes_and_heterogeneity():
    data = fl_data.synthetic(0.5, 0.5, num_clients=30, samples_per_client=100, seed=0)
    assert data.num_clients == 30 and data.dim == 60 and data.num_classes == 10
    assert data.train.count.tolist() == [60] * 30 and data.val.count.tolist() == [20] * 30
    assert data.test.count.tolist() == [20] * 30
    # Same seed, same data; heterogeneous clients have different label distributions.
    again = fl_data.synthetic(0.5, 0.5, num_clients=30, samples_per_client=100, seed=0)
    torch.testing.assert_close(data.train.x, again.train.x)
    hist = torch.stack([torch.bincount(data.train.y[k], minlength=10) for k in range(30)]).double()
    assert float(hist.std(0).mean()) > 3.0
    iid = fl_data.synthetic(0.0, 0.0, num_clients=5, iid=True, seed=0)
    assert iid.name == "synthetic_iid"
    lognormal = fl_data.synthetic(1.0, 1.0, num_clients=10, samples_per_client=None, seed=1)
    total = lognormal.train.count + lognormal.val.count + lognormal.test.count
    assert bool((total >= 50).all())


def test_synthetic_labels_follow_the_client_model():
    # y = argmax(x W_k + b_k): a per-client logistic regression fits its own train data well.
    data = fl_data.synthetic(1.0, 1.0, num_clients=10, samples_per_client=400, seed=3)
    from sklearn.linear_model import LogisticRegression

    # Synthetic(1, 1)'s label skew is strong: a client can get a single class (with 3 clients,
    # MORL_TEST_SEED_OFFSET=2 drew three), which its model trivially explains and no classifier
    # can fit. Of 10 clients, 4-10 had several classes over seeds 3-22.
    fitted = 0
    for k in range(10):
        n = int(data.train.count[k])
        x, y = data.train.x[k, :n].numpy(), data.train.y[k, :n].numpy()
        if len(np.unique(y)) == 1:
            continue
        clf = LogisticRegression(max_iter=2000, C=100.0).fit(x, y)
        assert clf.score(x, y) > 0.9
        fitted += 1
    assert fitted >= 3


def test_dirichlet_split_covers_everything_once():
    labels = np.repeat(np.arange(10), 50)
    parts = fl_data.dirichlet_split(labels, 8, alpha=0.3, min_size=10, seed=0)
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(500))
    assert min(len(p) for p in parts) >= 10
    digits = fl_data.digits(num_clients=5, alpha=0.5, seed=0)
    assert digits.num_clients == 5 and digits.dim == 64
    with pytest.raises(ValueError, match="alpha"):
        fl_data.dirichlet_split(labels, 4, alpha=0.0)
