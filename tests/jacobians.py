"""Generated Jacobians of controlled rank, row-norm spread and scale for the property suites."""

from __future__ import annotations

import torch


def controlled(gen, k, d, rank, spread=0.0, scale=1.0, dtype=torch.float64):
    """K×D of rank ``rank``; row norms spread over ``spread`` decades; overall ``scale``."""
    u = torch.randn(k, rank, generator=gen, dtype=torch.float64)
    v = torch.randn(rank, d, generator=gen, dtype=torch.float64)
    rows = 10 ** torch.linspace(0.0, -spread, k, dtype=torch.float64)
    return ((u @ v) * rows[:, None] * scale).to(dtype)


def randomly_spread(gen, k, d, rank, spread, stationary=False):
    """K×D (float64) of rank ``rank`` whose row norms are spread at random over ``spread``
    decades; with ``stationary`` the last row is minus a positive combination of the others
    (0 is in the hull: a Pareto-stationary point), before the spread."""
    j = torch.randn(k, rank, generator=gen, dtype=torch.float64) @ torch.randn(
        rank, d, generator=gen, dtype=torch.float64
    )
    if stationary:
        j[-1] = -(torch.rand(k - 1, generator=gen, dtype=torch.float64) + 0.1) @ j[:-1]
    return j * (10.0 ** (spread * torch.rand(k, 1, generator=gen, dtype=torch.float64)))


def stationary(gen, k, d, rank, scale=1.0, dtype=torch.float64):
    """Pareto-stationary K×D: rows of rank ≤ rank + 1 whose combination with weights λ > 0 is 0."""
    j = controlled(gen, k, d, rank)
    lam = torch.rand(k, generator=gen, dtype=torch.float64) + 0.1
    j = j - (lam / lam.sum()) @ j
    return (j * scale).to(dtype)


def cases(gen, dtype, ks=(3, 5, 10, 20, 40), spreads=(4.0, 6.0)):
    """(label, J) over K, rank, spread and scale; float64 generation, then cast."""
    for k in ks:
        for scale in (1e-12, 1.0, 1e12):
            yield f"K={k} full s={scale:g}", controlled(gen, k, 3 * k, k, scale=scale, dtype=dtype)
            yield f"K={k} rank-deficient s={scale:g}", controlled(gen, k, 30, max(1, k // 3), scale=scale, dtype=dtype)
            yield f"K={k} stationary s={scale:g}", stationary(gen, k, 30, max(1, k // 2), scale=scale, dtype=dtype)
        for spread in spreads:
            yield f"K={k} spread 1e{spread:g}", controlled(gen, k, 3 * k + 5, k, spread=spread, dtype=dtype)


def _conflict(j, d):
    """min_k g_k·d / (‖g_k‖ max_j ‖g_j‖), in float64 (≥ 0: no objective increases along −d)."""
    j64, d64 = j.double(), d.double()
    norms = j64.norm(dim=1)
    return ((j64 @ d64) / (norms.clamp_min(1e-300) * norms.max())).min().item()


def sample_jacobian(gen, k, d, rank=None, scale=1.0, dtype=torch.float64, shared=0.5):
    """K×D matrix of the given rank, with a shared component so that methods differ."""
    rank = max(1, min(rank or min(k, d), k, d))
    u = torch.randn(k, rank, generator=gen, dtype=torch.float64)
    v = torch.randn(rank, d, generator=gen, dtype=torch.float64)
    j = u @ v / rank**0.5 + shared * torch.randn(1, d, generator=gen, dtype=torch.float64)
    return (j * scale).to(dtype)


def jacobians(gen, n=12):
    shapes = [(2, 5), (3, 3), (5, 40), (8, 4), (20, 50)]
    for i in range(n):
        k, d = shapes[i % len(shapes)]
        rank = [None, 1, max(1, k // 2)][i % 3]
        yield sample_jacobian(gen, k, d, rank=rank, scale=SCALES[i % len(SCALES)])


SCALES = (1e-12, 1e-6, 1.0, 1e6, 1e12)
