"""Orders that ignore gradients: random reshuffling, FlipFlop and Random FlipFlop (JoGBa paper, §3.1 and §4).

``shared=True`` keeps one order for all objectives (the paper's main tables);
``shared=False`` draws/reverses an independent order per objective (its ablation).
"""

from __future__ import annotations

import torch

from morl.ordering.base import Ordering


class _Simple(Ordering):
    def __init__(
        self,
        num_samples: int,
        num_objectives: int,
        batch_size: int = 1,
        seed: int = 0,
        shared: bool = True,
        init_order: str | None = None,
        shuffle_units: bool = True,
    ) -> None:
        init = init_order or ("random_shared" if shared else "random_per_objective")
        super().__init__(num_samples, num_objectives, batch_size, seed, init, shuffle_units)
        self.shared = shared

    def _random(self) -> torch.Tensor:
        m, k = self.num_objectives, self.num_units
        if self.shared:
            return torch.randperm(k, generator=self.generator).repeat(m, 1)
        return torch.stack([torch.randperm(k, generator=self.generator) for _ in range(m)])


class RandomReshuffle(_Simple):
    """A fresh random permutation every epoch."""

    def _next_orders(self) -> torch.Tensor:
        return self._random()


class FlipFlop(_Simple):
    """π_{t+1}(k) = π_t(K+1−k): the previous order reversed (two orders alternate)."""

    def _next_orders(self) -> torch.Tensor:
        return self._orders.flip(1)


class RandomFlipFlop(_Simple):
    """Rajput et al. 2021: random on even epochs, the reverse of the previous one on odd ones."""

    def _next_orders(self) -> torch.Tensor:
        # self.epoch is the epoch just finished; the next one is epoch + 1.
        return self._orders.flip(1) if (self.epoch + 1) % 2 == 1 else self._random()
