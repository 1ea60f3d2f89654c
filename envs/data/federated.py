"""Federated datasets as padded per-client tensors (clients are objectives).

* :func:`synthetic` — FedProx's synthetic(ρ1, ρ2) generator (Li et al. 2020, used by MosT):
  per client k, ``u_k ~ N(0, ρ1)``, ``W_k ∈ R^{d×C} ~ N(u_k, 1)``, ``b_k ∈ R^C ~ N(u_k, 1)``,
  ``B_k ~ N(0, ρ2)``, ``v_k ∈ R^d ~ N(B_k, 1)``, ``x ~ N(v_k, Σ)`` with ``Σ = diag(j^{-1.2})``,
  ``y = argmax softmax(x W_k + b_k)``. ρ are standard deviations (as in the generator's
  ``np.random.normal(0, alpha)``). IID variant: one global ``W, b ~ N(0, 1)`` and ``v_k = 0``.
  Samples per client: a fixed count (MosT's script, default 100) or FedProx's
  ``int(lognormal(4, 2)) + 50``. Split 6:2:2 train/val/test per client (MosT paper, App. D.2).
* :func:`digits` — sklearn's bundled 8×8 digits split across clients by a per-class
  Dirichlet(α) draw (Hsu et al. 2019), resampled until every client has ``min_size`` samples.

Everything is generated from a seed; nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

SPLIT = (0.6, 0.2, 0.2)


@dataclass
class ClientSplit:
    """One split (train, val or test) of every client, padded to the largest client."""

    x: torch.Tensor  #: [n, S, d]
    y: torch.Tensor  #: [n, S] (int64; padding rows are 0)
    count: torch.Tensor  #: [n] real samples per client (int64)

    def to(self, device) -> ClientSplit:
        return ClientSplit(self.x.to(device), self.y.to(device), self.count.to(device))


@dataclass
class FederatedData:
    """A federated classification dataset: ``train``, ``val``, ``test`` splits of ``n`` clients."""

    name: str
    train: ClientSplit
    val: ClientSplit
    test: ClientSplit
    num_classes: int

    @property
    def num_clients(self) -> int:
        return int(self.train.count.shape[0])

    @property
    def dim(self) -> int:
        return int(self.train.x.shape[-1])

    def to(self, device) -> FederatedData:
        return FederatedData(
            self.name, self.train.to(device), self.val.to(device), self.test.to(device), self.num_classes
        )

    def client(self, i: int) -> FederatedData:
        """Client ``i`` alone (a one-client dataset), e.g. for a Flower ClientApp."""
        pick = lambda s: ClientSplit(s.x[i : i + 1], s.y[i : i + 1], s.count[i : i + 1])  # noqa: E731
        return FederatedData(self.name, pick(self.train), pick(self.val), pick(self.test), self.num_classes)


def _pad(parts: list[tuple[np.ndarray, np.ndarray]], dim: int) -> ClientSplit:
    size = max(1, max(len(y) for _, y in parts))
    x = np.zeros((len(parts), size, dim), dtype=np.float32)
    y = np.zeros((len(parts), size), dtype=np.int64)
    for k, (xk, yk) in enumerate(parts):
        x[k, : len(yk)] = xk
        y[k, : len(yk)] = yk
    count = np.array([len(yk) for _, yk in parts], dtype=np.int64)
    return ClientSplit(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(count))


def _split_clients(
    name: str, clients: list[tuple[np.ndarray, np.ndarray]], num_classes: int, rng: np.random.Generator
) -> FederatedData:
    splits: list[list] = [[], [], []]
    for x, y in clients:
        order = rng.permutation(len(y))
        n_train = int(round(SPLIT[0] * len(y)))
        n_val = int(round(SPLIT[1] * len(y)))
        cuts = (order[:n_train], order[n_train : n_train + n_val], order[n_train + n_val :])
        for s, idx in zip(splits, cuts):
            s.append((x[idx], y[idx]))
    dim = clients[0][0].shape[1]
    for s, label in zip(splits, ("train", "val", "test")):
        if any(len(y) == 0 for _, y in s):
            raise ValueError(f"a client has no {label} samples; give every client at least 5 samples")
    return FederatedData(name, *(_pad(s, dim) for s in splits), num_classes=num_classes)


def synthetic(
    rho1: float = 0.5,
    rho2: float = 0.5,
    num_clients: int = 30,
    dim: int = 60,
    num_classes: int = 10,
    samples_per_client: int | None = 100,
    iid: bool = False,
    seed: int = 0,
) -> FederatedData:
    """FedProx synthetic(ρ1, ρ2); ``samples_per_client=None`` draws FedProx's lognormal counts."""
    if rho1 < 0 or rho2 < 0:
        raise ValueError(f"rho1 and rho2 are standard deviations and must be >= 0, got {rho1}, {rho2}")
    if num_clients < 1 or dim < 1 or num_classes < 2:
        raise ValueError(f"need num_clients >= 1, dim >= 1, num_classes >= 2; got {num_clients}, {dim}, {num_classes}")
    if samples_per_client is not None and samples_per_client < 5:
        raise ValueError(f"samples_per_client must be >= 5 (6:2:2 split), got {samples_per_client}")
    rng = np.random.default_rng(seed)
    if samples_per_client is None:
        sizes = rng.lognormal(4, 2, num_clients).astype(int) + 50
    else:
        sizes = np.full(num_clients, samples_per_client)
    cov = np.array([(j + 1) ** -1.2 for j in range(dim)])
    w_global, b_global = rng.normal(0, 1, (dim, num_classes)), rng.normal(0, 1, num_classes)
    clients = []
    for k in range(num_clients):
        u = rng.normal(0, rho1)
        big_b = rng.normal(0, rho2)
        v = np.zeros(dim) if iid else rng.normal(big_b, 1, dim)
        w, b = (w_global, b_global) if iid else (rng.normal(u, 1, (dim, num_classes)), rng.normal(u, 1, num_classes))
        x = rng.normal(v, np.sqrt(cov), (sizes[k], dim))
        y = np.argmax(x @ w + b, axis=1)  # argmax of the softmax = argmax of the logits
        clients.append((x.astype(np.float32), y.astype(np.int64)))
    tag = "iid" if iid else f"{rho1:g}_{rho2:g}"
    return _split_clients(f"synthetic_{tag}", clients, num_classes, rng)


def dirichlet_split(
    labels: np.ndarray, num_clients: int, alpha: float, min_size: int = 10, seed: int = 0, max_tries: int = 1000
) -> list[np.ndarray]:
    """Indices per client: each class is divided by a ``Dir(α·1)`` draw (resampled until every
    client holds at least ``min_size`` samples)."""
    if alpha <= 0:
        raise ValueError(f"dirichlet alpha must be > 0, got {alpha}")
    if num_clients * min_size > len(labels):
        raise ValueError(f"{num_clients} clients x min_size {min_size} exceeds the {len(labels)} samples")
    rng = np.random.default_rng(seed)
    for _ in range(max_tries):
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            p = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(p)[:-1] * len(idx)).astype(int)
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.array(sorted(p), dtype=np.int64) for p in parts]
    raise ValueError(
        f"no Dirichlet({alpha}) split gave every client >= {min_size} samples in {max_tries} tries; raise alpha or lower min_size"
    )


def digits(num_clients: int = 10, alpha: float = 0.5, min_size: int = 20, seed: int = 0) -> FederatedData:
    """sklearn digits (1,797 images, 64 features scaled to [0, 1], 10 classes), Dirichlet non-IID."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    parts = dirichlet_split(y, num_clients, alpha, min_size, seed)
    rng = np.random.default_rng(seed + 1)
    return _split_clients(f"digits_dir{alpha:g}", [(x[p], y[p].astype(np.int64)) for p in parts], 10, rng)


def build(kind: str, **options) -> FederatedData:
    """``synthetic`` or ``digits`` with their keyword options."""
    makers = {"synthetic": synthetic, "digits": digits}
    if kind not in makers:
        raise ValueError(f"unknown federated dataset {kind!r}; allowed: {', '.join(makers)}")
    return makers[kind](**options)


__all__ = ["ClientSplit", "FederatedData", "synthetic", "digits", "dirichlet_split", "build"]
