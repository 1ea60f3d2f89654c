"""Data of FORUM's multi-objective hyper-cleaning (Ye et al., arXiv:2401.09257, §5.1): m rotated
shards of scikit-learn's bundled digits with corrupted training labels (the learner:
morl.agents.supervised.hypercleaning)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

Split = tuple[torch.Tensor, torch.Tensor]


@dataclass
class HyperCleaningData:
    """Per-dataset lists of ``(x, y)`` splits; ``clean[i]`` marks uncorrupted training labels."""

    train: list[Split]
    clean: list[torch.Tensor]
    val1: list[Split]
    val2: list[Split]
    test: list[Split]
    num_classes: int = 10

    @property
    def m(self) -> int:
        return len(self.train)

    @property
    def in_dim(self) -> int:
        return self.train[0][0][0].numel()

    def to(self, device: torch.device) -> HyperCleaningData:
        move = lambda splits: [(x.to(device), y.to(device)) for x, y in splits]  # noqa: E731
        return HyperCleaningData(
            move(self.train),
            [c.to(device) for c in self.clean],
            move(self.val1),
            move(self.val2),
            move(self.test),
            self.num_classes,
        )


def make_hypercleaning_data(m: int = 2, noise: float = 0.5, seed: int = 0) -> HyperCleaningData:
    """Digits split into ``m`` rotated shards, each with train (50%) / val-1 / val-2 / test (25%).

    A fraction ``noise`` of each shard's training samples get a label drawn uniformly from the
    other nine classes; which ones is fixed by ``seed``.
    """
    from morl.envs.data.supervised import load_dataset

    if not 1 <= m <= 4:
        raise ValueError(f"m (number of datasets) must be between 1 and 4 (rotations by 0/90/180/270 degrees), got {m}")
    if not 0.0 <= noise < 1.0:
        raise ValueError(f"noise must be in [0, 1), got {noise}")
    data = load_dataset("digits", seed=seed, tasks=("digit",), fractions=(0.5, 0.25, 0.25))
    gen = torch.Generator().manual_seed(seed + 1)
    out: dict[str, list] = {"train": [], "clean": [], "val1": [], "val2": [], "test": []}
    for i in range(m):
        rotate = lambda x: torch.rot90(x, k=i, dims=(-2, -1)).reshape(x.shape[0], -1)  # noqa: B023, E731
        x, y = data.train[0][i::m], data.train[1][i::m, 0].long()
        n_bad = int(round(noise * x.shape[0]))
        bad = torch.randperm(x.shape[0], generator=gen)[:n_bad]
        shift = torch.randint(1, 10, (n_bad,), generator=gen)  # another class, uniform over the other 9
        y_noisy = y.clone()
        y_noisy[bad] = (y[bad] + shift) % 10
        out["train"].append((rotate(x), y_noisy))
        out["clean"].append(y_noisy == y)
        xv, yv = data.val[0][i::m], data.val[1][i::m, 0].long()
        half = xv.shape[0] // 2
        out["val1"].append((rotate(xv[:half]), yv[:half]))
        out["val2"].append((rotate(xv[half:]), yv[half:]))
        out["test"].append((rotate(data.test[0][i::m]), data.test[1][i::m, 0].long()))
    return HyperCleaningData(**out)


__all__ = ["HyperCleaningData", "make_hypercleaning_data"]
