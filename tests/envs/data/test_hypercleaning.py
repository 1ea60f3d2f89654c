"""FORUM's hyper-cleaning data (envs/data/hypercleaning.py): shard i is the digits rotated by
i·90° (checked with numpy's rot90 against the unsharded data), exactly ``round(noise·n)``
training labels per shard are changed, each to another class, and the rest are untouched."""

import numpy as np
import pytest
import torch

from morl.envs.data.hypercleaning import make_hypercleaning_data


def test_shard_i_is_the_data_rotated_by_i_quarter_turns():
    whole = make_hypercleaning_data(m=1, noise=0.0, seed=0)
    shards = make_hypercleaning_data(m=3, noise=0.0, seed=0)
    for i in range(3):
        x, y = shards.test[i]
        back = np.rot90(x.view(-1, 8, 8).numpy(), k=-i, axes=(1, 2)).reshape(x.shape[0], -1)
        np.testing.assert_array_equal(back, whole.test[0][0][i::3].numpy())
        assert torch.equal(y, whole.test[0][1][i::3])


@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_exactly_the_noisy_fraction_of_labels_changes_each_to_another_class(noise):
    clean = make_hypercleaning_data(m=2, noise=0.0, seed=4)
    noisy = make_hypercleaning_data(m=2, noise=noise, seed=4)
    for i in range(2):
        y, y_noisy, mask = clean.train[i][1], noisy.train[i][1], noisy.clean[i]
        assert int((~mask).sum()) == round(noise * len(y))
        assert torch.equal(y_noisy[mask], y[mask]) and (y_noisy[~mask] != y[~mask]).all()
        assert torch.equal(noisy.train[i][0], clean.train[i][0])
        assert torch.equal(noisy.val1[i][1], clean.val1[i][1])  # only the training labels are corrupted


def test_bad_sizes_are_one_line():
    with pytest.raises(ValueError, match=r"m \(number of datasets\) must be between 1 and 4"):
        make_hypercleaning_data(m=5)
    with pytest.raises(ValueError, match=r"noise must be in \[0, 1\), got 1.0"):
        make_hypercleaning_data(noise=1.0)
