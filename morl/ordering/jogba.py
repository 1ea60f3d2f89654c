"""JoGBa (Joint Gradient Balancing), Algorithm 1 of the JoGBa paper, with its online greedy
balancing (Alg. 2).

Each iteration k, objective m's gradient on its own unit π_t^m(k) is centred by a stale
mean and given a sign ε by comparing ‖s + g‖ and ‖s − g‖ for ONE running signed sum s shared
by all objectives, updated after each objective in the fixed order m = 1..M. Units with
ε = +1 fill π_{t+1}^m from the front (arrival order), those with ε = −1 from the back, so
π_{t+1}^m = plus_m ++ reverse(minus_m). The ordering never sees the MTL weights λ.

Memory: s, the stale mean v_t and its accumulator v_{t+1} (3·D floats, or (1+2M)·D with
per-objective centring), the signs (M·K booleans) and the orders; no per-sample gradient is
stored.
"""

from __future__ import annotations

import torch

from morl.ordering.base import NORMS, Ordering, greedy_signs, reorder

CENTERINGS = ("joint_sum", "per_objective", "joint_mean", "none")


class JoGBa(Ordering):
    """Algorithm 1. ``centering``:

    * ``joint_sum`` (default, literal): v_t = Σ_m mean_k ∇ℓ_m, one D-vector subtracted from
      every objective's gradient (Alg. 1 lines 10 and 19 as printed);
    * ``per_objective``: objective m is centred by its own stale mean v_{m,t} (as in Alg. 3)
      while s stays shared -- the variant that beats per-objective GraB in our
      simulations (docs/jogba.md);
    * ``joint_mean``: v_t / M; ``none``: no centring.

    ``norm``: ``inf`` (paper) or ``l2`` (GraB reference code).
    """

    needs_gradients = True
    _state_tensors = ("v", "v_next", "s", "signs")

    def __init__(
        self,
        num_samples: int,
        num_objectives: int,
        batch_size: int = 1,
        seed: int = 0,
        centering: str = "joint_sum",
        norm: str = "inf",
        init_order: str = "random_shared",
        shuffle_units: bool = True,
    ) -> None:
        if centering not in CENTERINGS:
            raise ValueError(f"centering={centering!r} is not valid; allowed: {', '.join(CENTERINGS)}")
        if norm not in NORMS:
            raise ValueError(f"norm={norm!r} is not valid; allowed: {', '.join(NORMS)}")
        super().__init__(num_samples, num_objectives, batch_size, seed, init_order, shuffle_units)
        self.centering, self.norm = centering, norm
        self.v: torch.Tensor | None = None  # stale mean: [D] (joint) or [M, D] (per objective)
        self.v_next: torch.Tensor | None = None
        self.s: torch.Tensor | None = None
        self.signs: torch.Tensor | None = None  # [M, K] bool on the gradients' device

    def _allocate(self, grads: torch.Tensor) -> None:
        m, d = grads.shape
        shape = (m, d) if self.centering == "per_objective" else (d,)
        if self.v is None:  # v_0 = 0: epoch 0 balances uncentred gradients
            self.v = grads.new_zeros(shape)
        self.v_next = grads.new_zeros(shape)
        self.s = grads.new_zeros(d)
        self.signs = torch.ones(m, self.num_units, dtype=torch.bool, device=grads.device)

    def _centre(self) -> torch.Tensor:
        if self.centering == "per_objective":
            return self.v
        if self.centering == "joint_mean":
            return self.v / self.num_objectives
        if self.centering == "none":
            return torch.zeros_like(self.v)
        return self.v

    def _observe(self, k: int, grads: torch.Tensor, direction: torch.Tensor | None) -> None:
        if self.s is None or self._observed == 0:
            self._allocate(grads)
        if grads.shape[1] != self.s.shape[0]:
            raise ValueError(f"grads have D={grads.shape[1]} entries, earlier iterations had {self.s.shape[0]}")
        centred = grads - self._centre()  # broadcasts over m for the joint centrings
        # Sequential on purpose: objective m's sign must see s after objectives 1..m-1 of the
        # same iteration (Alg. 1 line 9), so the M signs cannot be taken in one batched op.
        for m in range(self.num_objectives):
            g = centred[m]
            plus = greedy_signs(self.s, g, self.norm)
            self.s += torch.where(plus, g, -g)
            self.signs[m, k] = plus
        if self.centering == "per_objective":
            self.v_next += grads / self.num_units
        else:
            self.v_next += grads.sum(0) / self.num_units  # line 19: sum over objectives

    def _next_orders(self) -> torch.Tensor:
        signs = self.signs.cpu()  # the one host read-back of the epoch
        self.last_signs = signs
        new = torch.stack([reorder(self._orders[m], signs[m]) for m in range(self.num_objectives)])
        self.v, self.v_next = self.v_next, None
        return new
