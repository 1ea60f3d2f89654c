"""Static per-sample gradients [M, K, d] fed to an ordering for whole epochs (the ordering tests' harness)."""

import torch


def run_static(ordering, G, epochs, lam=None):
    """Feed static per-sample gradients G [M, K, d] (unit k = sample k) for some epochs."""
    M = G.shape[0]
    lam = torch.full((M,), 1.0 / M, dtype=G.dtype) if lam is None else lam
    for _ in range(epochs):
        for k, units in enumerate(ordering.iter_units()):
            grads = G[torch.arange(M), units]
            ordering.observe(k, grads, lam @ grads)
    return ordering.orders()


def make(cls, G, **kw):
    M, K, _ = G.shape
    return cls(K, M, batch_size=1, shuffle_units=False, **kw)


def gaussian_grads(M, K, d, seed, corr=0.6, offset=0.5):
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(1, K, d, generator=g, dtype=torch.float64)
    own = torch.randn(M, K, d, generator=g, dtype=torch.float64)
    mean = offset * torch.randn(M, 1, d, generator=g, dtype=torch.float64)
    return corr**0.5 * shared + (1 - corr) ** 0.5 * own + mean
