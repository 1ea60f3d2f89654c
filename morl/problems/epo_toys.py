"""The synthetic problems of the EPO-AL paper, with their known solutions.

Both families are J_k(w) = phi(||w - w_k||^2) around anchors w_k on the unit sphere:

* ``"convex"``:    J_k = sqrt(1 + ||w - w_k||^2) - 1
* ``"nonconvex"``: J_k = 1 - exp(-||w - w_k||^2)   (Lin et al. 2019)

For any strictly increasing phi the Pareto set is the convex hull of the anchors, so a
"planted" point w* = sum_k alpha_k w_k with r_k proportional to 1/J_k(w*) is an exact Pareto
(EPO) point: fair (all r_k J_k equal) and Pareto optimal, and it solves the weighted min-max
problem min_w max_k r_k J_k(w) with value t* = 1 / sum_k (1 / J_k(w*)) (for sum r = 1).
Everything is batched over leading dimensions of ``w`` and seeded by a ``torch.Generator``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

KINDS = ("convex", "nonconvex")

#: Fig. 1 of the paper: K=2 non-convex objectives in d=3 with anchors +-1_3/sqrt(3).
FIG1_PREFERENCE = (0.2, 0.8)
FIG1_MU = 0.1
FIG1_ETA = 10.0
#: Its EPO point w* = t* 1_3/sqrt(3), t* solving 0.2(1-e^{-(t-1)^2}) = 0.8(1-e^{-(t+1)^2}).
FIG1_SOLUTION_COORD = -0.287029
FIG1_MINMAX_VALUE = 0.178739
FIG1_DUAL_LIMIT = (0.56721, 0.23117)


@dataclass
class AnchorProblem:
    """K objectives J_k(w) = phi(||w - anchor_k||^2); ``anchors`` is [K, d]."""

    anchors: torch.Tensor
    kind: str = "convex"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not valid; allowed: {', '.join(KINDS)}")
        if self.anchors.dim() != 2:
            raise ValueError(f"anchors must be [K, d], got shape {tuple(self.anchors.shape)}")

    def _sq_dist(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        diff = w.unsqueeze(-2) - self.anchors  # [..., K, d]
        return diff, (diff * diff).sum(-1)

    def values(self, w: torch.Tensor) -> torch.Tensor:
        """J(w): [..., d] -> [..., K]."""
        _, sq = self._sq_dist(w)
        if self.kind == "convex":
            return torch.sqrt(1.0 + sq) - 1.0
        return -torch.expm1(-sq)

    def jacobian(self, w: torch.Tensor) -> torch.Tensor:
        """Rows are the gradients: [..., d] -> [..., K, d] (closed forms of the paper's two families, §V)."""
        diff, sq = self._sq_dist(w)
        if self.kind == "convex":
            scale = torch.rsqrt(1.0 + sq)
        else:
            scale = 2.0 * torch.exp(-sq)
        return scale.unsqueeze(-1) * diff


def fig1_toy(dtype: torch.dtype = torch.float64) -> tuple[AnchorProblem, torch.Tensor]:
    """The Fig. 1 problem and its preference r = (0.2, 0.8)."""
    a = torch.full((3,), 1.0 / math.sqrt(3.0), dtype=dtype)
    return AnchorProblem(torch.stack([a, -a]), "nonconvex"), torch.tensor(FIG1_PREFERENCE, dtype=dtype)


def unit_sphere(n: int, d: int, generator: torch.Generator | None = None, dtype=torch.float64) -> torch.Tensor:
    """n points uniform on the unit sphere S^{d-1} (normalised Gaussians)."""
    x = torch.randn(n, d, generator=generator, dtype=dtype)
    return x / x.norm(dim=1, keepdim=True)


def dirichlet_ones(k: int, generator: torch.Generator | None = None, dtype=torch.float64) -> torch.Tensor:
    """A sample of Dirichlet(1_K), i.e. uniform on the simplex (normalised exponentials)."""
    e = -torch.log(torch.rand(k, generator=generator, dtype=dtype).clamp_min(1e-300))
    return e / e.sum()


def random_instance(
    k: int, d: int, kind: str = "convex", generator: torch.Generator | None = None, dtype=torch.float64
):
    """The paper's random setup: anchors and w0 on the sphere, r uniform on {r in simplex: r_k > 1/(3K)}.

    Returns ``(problem, preference, w0)``. Note: for K >= 3 the EPO set is often empty here
    (the min-max solution has only some objectives active), so exact fairness is not guaranteed; use
    :func:`planted_instance` for that.
    """
    anchors = unit_sphere(k, d, generator, dtype)
    r = 1.0 / (3 * k) + (2.0 / 3.0) * dirichlet_ones(k, generator, dtype)
    w0 = unit_sphere(1, d, generator, dtype)[0]
    return AnchorProblem(anchors, kind), r, w0


def planted_instance(
    k: int, d: int, kind: str = "convex", generator: torch.Generator | None = None, dtype=torch.float64
):
    """An instance with a known EPO point. Returns ``(problem, preference, w0, w_star, t_star)``.

    w* = sum alpha_k w_k with alpha ~ Dirichlet(1_K), r_k proportional to 1/J_k(w*) with sum r = 1,
    so r_k J_k(w*) = t* = 1 / sum_k 1/J_k(w*) for every k.
    """
    problem, _, w0 = random_instance(k, d, kind, generator, dtype)
    alpha = dirichlet_ones(k, generator, dtype)
    w_star = alpha @ problem.anchors
    j_star = problem.values(w_star)
    t_star = 1.0 / (1.0 / j_star).sum()
    r = t_star / j_star
    return problem, r, w0, w_star, t_star


def descend(problem: AnchorProblem, aggregator, w0: torch.Tensor, lr: float, iterations: int) -> torch.Tensor:
    """Plain gradient descent with a morl aggregator: w <- w - lr * aggregator(G(w), J(w))."""
    w = w0.clone()
    for _ in range(iterations):
        w = w - lr * aggregator(problem.jacobian(w), problem.values(w))
    return w
