"""Bi-level test problems with known solution sets, for FORUM (Ye et al., arXiv:2401.09257).

* :class:`Eq24Problem` — the paper's synthetic MOBLO (App. C, Eq. 24), α ∈ R, ω ∈ R²:

      min (‖ω − (1, α)‖², ‖ω − (2, α)‖²)   s.t.   ω ∈ argmin_ω ‖ω − (α, α)‖²

  ω*(α) = (α, α) and the optimal set is {α = ω_1 = ω_2 = c, c ∈ [1, 2]}.
* :class:`BilevelQuadratic` — m = 1, F = ½‖ω − b‖² + ½‖α‖², f = ½‖ω − Aα‖²; the unique solution
  is α* = (AᵀA + I)⁻¹Aᵀb, ω* = Aα*.
* :class:`ParetoQuadratic` — m objectives F_i = ½‖ω − b_i‖², f = ½‖ω − α‖²; the optimal set is
  {α = ω ∈ conv{b_i}}.

Objectives take the parameter tensors explicitly, so they plug into :class:`morl.bilevel.FORUM`
as closures and into tests as plain functions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from morl.solvers.min_norm import min_norm

__all__ = ["Eq24Problem", "BilevelQuadratic", "ParetoQuadratic", "FIG2_INITS"]

#: Fig. 2 initialisations (α_0, ω_0): panel (a) and the extra start of panel (b).
FIG2_INITS: tuple[tuple[float, tuple[float, float]], ...] = ((0.0, (0.0, 3.0)), (2.0, (0.0, 3.0)), (2.0, (3.0, 3.0)))


class Eq24Problem:
    """The synthetic problem of the FORUM paper (Eq. 24); α has shape [1], ω shape [2]."""

    m = 2

    def upper(self, alpha: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
        """(‖ω − (1, α)‖², ‖ω − (2, α)‖²) as a [2] tensor."""
        first = torch.stack([omega[0] - 1.0, omega[0] - 2.0])
        second = (omega[1] - alpha[0]).pow(2)
        return first.pow(2) + second

    def lower(self, alpha: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
        """f(α, ω) = ‖ω − (α, α)‖²."""
        return (omega - alpha[0]).pow(2).sum()

    def q(self, alpha: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
        """The true constraint q = f − f*(α) = f (f* ≡ 0)."""
        return self.lower(alpha, omega)

    def distance(self, alpha: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
        """ℰ = dist(z, 𝒫): z projected onto the segment {c·(1,1,1), c ∈ [1, 2]}."""
        z = torch.cat([alpha.reshape(-1), omega.reshape(-1)])
        c = z.mean().clamp(1.0, 2.0)
        return (z - c).norm()

    def kkt(self, alpha: torch.Tensor, omega: torch.Tensor, lam: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
        """𝒦(z) = ‖Σλ_i∇F_i + ν∇q‖² with the true ∇q (= ∇f here, since ∇_α f(α, ω*(α)) = 0)."""
        a = alpha.detach().clone().requires_grad_(True)
        w = omega.detach().clone().requires_grad_(True)
        F = self.upper(a, w)
        combined = (lam.to(F) * F).sum() + nu.to(F) * self.q(a, w)
        ga, gw = torch.autograd.grad(combined, (a, w))
        return ga.pow(2).sum() + gw.pow(2).sum()


@dataclass
class BilevelQuadratic:
    """m = 1: F = ½‖ω − b‖² + ½‖α‖², f = ½‖ω − Aα‖² with A [p, n], b [p]."""

    A: torch.Tensor
    b: torch.Tensor

    @classmethod
    def random(cls, n: int = 3, p: int = 4, generator: torch.Generator | None = None, dtype=torch.float64):
        A = torch.randn(p, n, generator=generator, dtype=dtype)
        b = torch.randn(p, generator=generator, dtype=dtype)
        return cls(A, b)

    def upper(self, alpha: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
        return (0.5 * (omega - self.b).pow(2).sum() + 0.5 * alpha.pow(2).sum()).reshape(1)

    def lower(self, alpha: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
        return 0.5 * (omega - self.A @ alpha).pow(2).sum()

    def solution(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(α*, ω*) from the normal equations (AᵀA + I)α = Aᵀb."""
        n = self.A.shape[1]
        eye = torch.eye(n, dtype=self.A.dtype, device=self.A.device)
        alpha = torch.linalg.solve(self.A.T @ self.A + eye, self.A.T @ self.b)
        return alpha, self.A @ alpha


@dataclass
class ParetoQuadratic:
    """F_i = ½‖ω − b_i‖² (rows of ``anchors`` [m, p]), f = ½‖ω − α‖², α and ω in R^p."""

    anchors: torch.Tensor

    @property
    def m(self) -> int:
        return self.anchors.shape[0]

    def upper(self, alpha: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
        return 0.5 * (omega[None, :] - self.anchors).pow(2).sum(dim=1)

    def lower(self, alpha: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
        return 0.5 * (omega - alpha).pow(2).sum()

    def hull_distance(self, point: torch.Tensor) -> torch.Tensor:
        """dist(point, conv{b_i}): the min-norm point of {b_i − point}."""
        diffs = (self.anchors - point[None, :]).to(torch.float64)
        lam = min_norm(diffs @ diffs.T)
        return (lam @ diffs).norm()
