"""The supervised data sets: digits splits and tasks, the CSV/NPZ file loader, MNIST-1D generated locally."""

import pytest
import torch

from morl.envs.data.supervised import load_dataset


# -- datasets ---------------------------------------------------------------------------------
def test_digits_splits_are_seeded_disjoint_and_labels_derived():
    a, b, c = load_dataset("digits", seed=1), load_dataset("digits", seed=1), load_dataset("digits", seed=2)
    assert torch.equal(a.train[0], b.train[0]) and not torch.equal(a.train[0], c.train[0])
    # The three splits partition the 1,797 images (compare multisets of rows with the full set).
    rows = torch.cat([a.train[0], a.val[0], a.test[0]]).flatten(1)
    from sklearn.datasets import load_digits

    full = torch.as_tensor(load_digits().images / 16.0, dtype=torch.float32).flatten(1)
    assert rows.shape[0] == 1797
    assert torch.equal(
        torch.sort(rows.sum(1) + rows[:, 20] * 1e-3).values, torch.sort(full.sum(1) + full[:, 20] * 1e-3).values
    )
    y = a.train[1]
    assert torch.equal(y[:, 1], y[:, 0] % 2) and torch.equal(y[:, 2], (y[:, 0] > 4).float())
    assert [s.num_classes for s in a.specs] == [10, 2, 2]
    with pytest.raises(ValueError, match="unknown digit task"):
        load_dataset("digits", tasks=["colour"])
    with pytest.raises(ValueError, match="unknown option"):
        load_dataset("digits", colour=1)


def test_digits_pair_and_regression_cosine():
    pair = load_dataset("digits_pair", num_samples=200)
    assert pair.train[0].shape[1:] == (8, 16) and pair.task_names == ["left", "right"]
    reg = load_dataset("regression", num_tasks=4, cosine=-0.3, dim=10)
    w = torch.as_tensor(reg.info["directions"])
    torch.testing.assert_close(w @ w.T, 1.3 * torch.eye(4, dtype=w.dtype) - 0.3, atol=1e-10, rtol=0)
    with pytest.raises(ValueError, match="cosine must lie in"):
        load_dataset("regression", num_tasks=3, cosine=-0.6)


def test_file_loader_csv_and_npz(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 3, generator=g)
    cls = (x[:, 0] > 0).float()
    csv = tmp_path / "d.csv"
    csv.write_text(
        "f0,f1,f2,label,value\n"
        + "\n".join(f"{a},{b},{c},{int(l)},{a + b}" for (a, b, c), l in zip(x.tolist(), cls.tolist()))
    )
    d = load_dataset("file", path=str(csv), targets=["label", "value"], task_kinds=["classification", "regression"])
    assert d.task_names == ["label", "value"] and d.specs[0].num_classes == 2 and d.in_dim == 3
    assert d.train[0].mean(0).abs().max() < 1e-5  # standardised with training statistics
    npz = tmp_path / "d.npz"
    import numpy as np

    np.savez(npz, x=x.numpy(), y=torch.stack([cls, x.sum(1)], 1).numpy())
    assert load_dataset("file", path=str(npz)).task_names == ["y0", "y1"]
    with pytest.raises(ValueError, match="not in the header"):
        load_dataset("file", path=str(csv), targets=["nope"])
    with pytest.raises(ValueError, match="does not exist"):
        load_dataset("file", path=str(tmp_path / "missing.csv"))


def test_mnist1d_generated_locally():
    d = load_dataset("mnist1d", num_samples=100)
    assert d.in_dim == 40 and d.train[0].shape[0] == 60 and d.task_names == ["digit", "parity", "large"]
