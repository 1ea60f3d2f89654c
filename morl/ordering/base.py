"""The ordering protocol shared by JoGBa, GraB and the simple baselines.

An ordering permutes K *units* (fixed-composition minibatches of ``batch_size`` dataset
indices; ``batch_size=1`` gives the per-sample algorithms of the paper) separately for each
of M objectives: at iteration k objective m uses unit ``orders()[m, k]``.

* ``iter_units()`` yields the ``[M]`` unit ids of every iteration and closes the epoch
  (``end_epoch``) after the last one; iterating the object itself (a
  ``torch.utils.data.Sampler``, use it as ``batch_sampler=``) yields the dataset indices of
  the M units concatenated, so rows ``[m*B:(m+1)*B]`` of the batch belong to objective m
  (see :meth:`task_index`).
* ``observe(k, grads [M, D], direction [D] | None)`` feeds iteration k's per-objective
  gradients (and the aggregated direction, used only by shared GraB) to the ordering. It
  performs no host synchronisation; signs are read back once per epoch in ``end_epoch``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler

INIT_ORDERS = ("random_shared", "random_per_objective", "identity")
NORMS = ("inf", "l2")


def make_units(num_samples: int, batch_size: int, generator: torch.Generator | None) -> torch.Tensor:
    """``[K, B]`` fixed minibatches covering every sample; the last one wraps around."""
    if num_samples < 1 or batch_size < 1:
        raise ValueError(f"num_samples and batch_size must be >= 1, got {num_samples} and {batch_size}")
    perm = torch.randperm(num_samples, generator=generator) if generator is not None else torch.arange(num_samples)
    k = -(-num_samples // batch_size)
    pad = k * batch_size - num_samples
    return torch.cat([perm, perm[:pad]]).view(k, batch_size)


def greedy_signs(s: torch.Tensor, g: torch.Tensor, norm: str) -> torch.Tensor:
    """Alg. 2 of JoGBa, batched over leading dims: +1 iff ‖s+g‖ <= ‖s−g‖ (a tie gives +1)."""
    if norm == "l2":
        # ‖s+g‖² − ‖s−g‖² = 4 s·g: no norms needed, and ties (s·g = 0) still give +1.
        return (s * g).sum(-1) <= 0
    return (s + g).abs().amax(-1) <= (s - g).abs().amax(-1)


def reorder(arrival: torch.Tensor, plus: torch.Tensor) -> torch.Tensor:
    """Next order: units with sign +1 in arrival order, then those with −1 reversed (GraB)."""
    return torch.cat([arrival[plus], arrival[~plus].flip(0)])


class Ordering(Sampler):
    """Base class: K units, M objectives, per-objective orders; subclasses define ``_next_orders``."""

    #: True for orderings that need :meth:`observe` on every iteration.
    needs_gradients: bool = False

    def __init__(
        self,
        num_samples: int,
        num_objectives: int,
        batch_size: int = 1,
        seed: int = 0,
        init_order: str = "random_shared",
        shuffle_units: bool = True,
    ) -> None:
        if num_objectives < 1:
            raise ValueError(f"num_objectives must be >= 1, got {num_objectives}")
        if init_order not in INIT_ORDERS:
            raise ValueError(f"init_order={init_order!r} is not valid; allowed: {', '.join(INIT_ORDERS)}")
        self.generator = torch.Generator().manual_seed(int(seed))
        self.units = make_units(num_samples, batch_size, self.generator if shuffle_units else None)
        self.num_units, self.batch_size = self.units.shape
        self.num_objectives = num_objectives
        self.epoch = 0
        self._orders = self._initial_orders(init_order)
        self._observed = 0
        self.last_signs: torch.Tensor | None = None  # [M, K] bool of the last finished epoch

    def _initial_orders(self, init_order: str) -> torch.Tensor:
        m, k = self.num_objectives, self.num_units
        if init_order == "identity":
            return torch.arange(k).repeat(m, 1)
        if init_order == "random_shared":
            return torch.randperm(k, generator=self.generator).repeat(m, 1)
        return torch.stack([torch.randperm(k, generator=self.generator) for _ in range(m)])

    # -- the protocol -----------------------------------------------------------------------
    def orders(self) -> torch.Tensor:
        """``[M, K]`` unit ids of the current epoch (``orders()[m, k]``: objective m, step k)."""
        return self._orders.clone()

    def observe(self, k: int, grads: torch.Tensor, direction: torch.Tensor | None = None) -> None:
        """Feed iteration ``k``'s per-objective gradients ``[M, D]`` (no-op for fixed orders)."""
        if not 0 <= k < self.num_units:
            raise ValueError(f"iteration index k={k} is outside 0..{self.num_units - 1}")
        if grads.dim() != 2 or grads.shape[0] != self.num_objectives:
            raise ValueError(f"grads must have shape [M={self.num_objectives}, D], got {tuple(grads.shape)}")
        self._observe(k, grads.detach(), None if direction is None else direction.detach())
        self._observed += 1

    def _observe(self, k: int, grads: torch.Tensor, direction: torch.Tensor | None) -> None:
        pass

    def end_epoch(self) -> None:
        """Build the next epoch's orders from what was observed."""
        if self.needs_gradients and self._observed != self.num_units:
            raise ValueError(
                f"{type(self).__name__} observed {self._observed} of {self.num_units} iterations this epoch; "
                "call observe(k, grads) after every step"
            )
        self._orders = self._next_orders()
        self._observed = 0
        self.epoch += 1

    def _next_orders(self) -> torch.Tensor:
        raise NotImplementedError

    def iter_units(self) -> Iterator[torch.Tensor]:
        """Yield the ``[M]`` unit ids of each iteration; ends the epoch after the last one."""
        orders = self._orders
        for k in range(self.num_units):
            yield orders[:, k]
        self.end_epoch()

    def task_index(self) -> torch.Tensor:
        """``[M, B]`` rows of a sampler batch that belong to each objective."""
        return torch.arange(self.num_objectives * self.batch_size).view(self.num_objectives, self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        for units in self.iter_units():
            yield self.units[units].reshape(-1).tolist()

    def __len__(self) -> int:
        return self.num_units

    # -- checkpoints ------------------------------------------------------------------------
    _state_tensors: tuple[str, ...] = ()

    def state_dict(self) -> dict[str, Any]:
        """Orders, units, epoch and random state (taken at an epoch boundary)."""
        state = {
            "orders": self._orders.clone(),
            "units": self.units.clone(),
            "epoch": self.epoch,
            "generator": self.generator.get_state(),
            "observed": self._observed,
        }
        for key in self._state_tensors:
            value = getattr(self, key)
            state[key] = None if value is None else value.detach().clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["orders"].shape != self._orders.shape:
            raise ValueError(
                f"saved orders have shape {tuple(state['orders'].shape)}, this ordering {tuple(self._orders.shape)}"
            )
        self._orders, self.units = state["orders"].clone(), state["units"].clone()
        self.epoch, self._observed = int(state["epoch"]), int(state["observed"])
        self.generator.set_state(state["generator"])
        for key in self._state_tensors:
            setattr(self, key, None if state[key] is None else state[key].clone())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(K={self.num_units}, M={self.num_objectives}, B={self.batch_size})"
