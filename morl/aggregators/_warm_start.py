"""Options and state shared by the aggregators that solve their K×K problem iteratively."""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_choice, check_number


class WarmStartSolver:
    """``max_iter`` / ``tol`` of the solver and ``warm_start``: begin each solve at the previous
    solution (same K). The previous solution is then state (``w_prev``), saved in checkpoints."""

    def _init_solver(self, name: str, max_iter: int, tol: float, warm_start: bool) -> None:
        check_number(name, "max_iter", max_iter, low=1, integer=True)
        check_number(name, "tol", tol)
        check_choice(name, "warm_start", warm_start, (True, False))
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = bool(warm_start)
        self.register_buffer("w_prev", None)

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        if name == "w_prev":  # a skipped first call leaves the uniform start, not zeros
            return torch.full_like(like, 1.0 / like.shape[-1])
        return super()._initial_state(name, like)

    def _start(self, k: int) -> torch.Tensor | None:
        """The previous solution when warm starting and K is unchanged, else None (cold start)."""
        if self.warm_start and self.w_prev is not None and self.w_prev.shape == (k,):
            return self.w_prev
        return None

    def _remember(self, w: torch.Tensor) -> None:
        if self.warm_start:
            self.w_prev = w.detach()
