"""Bitwise comparison of nested checkpoint states (tensors, numpy arrays, dicts, lists, scalars).
Measured durations (``train_seconds``) are not compared: a resumed run spends other seconds."""

import torch


def assert_state_equal(a, b, path: str = "state") -> None:
    """Assert ``a`` and ``b`` are equal bit for bit, naming the first differing entry."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), f"{path} differs"
    elif isinstance(a, dict):
        assert set(a) == set(b), f"{path} keys differ"
        for k in set(a) - {"train_seconds"}:
            assert_state_equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path} lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_state_equal(x, y, f"{path}[{i}]")
    elif hasattr(a, "shape"):  # numpy
        assert (a == b).all(), f"{path} differs"
    else:
        assert a == b, f"{path} differs: {a!r} != {b!r}"
