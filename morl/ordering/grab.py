"""GraB baselines of the JoGBa paper.

* :class:`GraBSeparate` (Alg. 3): M independent single-objective GraB instances, one
  running sum s_m and stale mean v_m per objective (the ablation's "per-objective GraB").
* :class:`GraBShared` (Alg. 4): GraB on the aggregated direction Σ_m λ_m ∇ℓ_m; one sign per
  iteration applied to every objective, so equal initial orders stay equal (main tables).
"""

from __future__ import annotations

import torch

from morl.ordering.base import NORMS, Ordering, greedy_signs, reorder


class _GraB(Ordering):
    needs_gradients = True
    _state_tensors = ("v", "v_next", "s", "signs")

    def __init__(
        self,
        num_samples: int,
        num_objectives: int,
        batch_size: int = 1,
        seed: int = 0,
        norm: str = "inf",
        init_order: str = "random_shared",
        shuffle_units: bool = True,
    ) -> None:
        if norm not in NORMS:
            raise ValueError(f"norm={norm!r} is not valid; allowed: {', '.join(NORMS)}")
        super().__init__(num_samples, num_objectives, batch_size, seed, init_order, shuffle_units)
        self.norm = norm
        self.v = self.v_next = self.s = self.signs = None

    def _next_orders(self) -> torch.Tensor:
        signs = self.signs.cpu()
        self.last_signs = signs
        new = torch.stack([reorder(self._orders[m], signs[m]) for m in range(self.num_objectives)])
        self.v, self.v_next = self.v_next, None
        return new


class GraBSeparate(_GraB):
    """Alg. 3: objective m is balanced alone (its own s_m, v_m); all M signs in one batched op."""

    def _observe(self, k: int, grads: torch.Tensor, direction: torch.Tensor | None) -> None:
        if self.s is None or self._observed == 0:
            if self.v is None:
                self.v = torch.zeros_like(grads)
            self.v_next, self.s = torch.zeros_like(grads), torch.zeros_like(grads)
            self.signs = torch.ones(self.num_objectives, self.num_units, dtype=torch.bool, device=grads.device)
        g = grads - self.v
        plus = greedy_signs(self.s, g, self.norm)  # [M]
        self.s += torch.where(plus[:, None], g, -g)
        self.signs[:, k] = plus
        self.v_next += grads / self.num_units


class GraBShared(_GraB):
    """Alg. 4: balance the centred aggregated direction; needs ``observe(k, grads, direction)``.

    ``literal_s_update=True`` applies the s-update inside the objective loop as printed
    (s changes by M·ε·g per iteration); the default applies it once (plain GraB on the
    aggregated direction), the evident intent.
    """

    def __init__(self, *args, literal_s_update: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.literal_s_update = literal_s_update

    def _observe(self, k: int, grads: torch.Tensor, direction: torch.Tensor | None) -> None:
        if direction is None:
            raise ValueError("GraBShared balances the aggregated direction: call observe(k, grads, direction)")
        if self.s is None or self._observed == 0:
            if self.v is None:
                self.v = torch.zeros_like(direction)
            self.v_next, self.s = torch.zeros_like(direction), torch.zeros_like(direction)
            self.signs = torch.ones(self.num_objectives, self.num_units, dtype=torch.bool, device=direction.device)
        g = direction - self.v
        plus = greedy_signs(self.s, g, self.norm)
        step = torch.where(plus, g, -g)
        self.s += step * (self.num_objectives if self.literal_s_update else 1)
        self.signs[:, k] = plus
        self.v_next += direction / self.num_units
