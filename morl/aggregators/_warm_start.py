"""Options and state of the aggregators that solve their K×K problem iteratively."""

import torch

from morl.aggregators._checks import check_choice, check_number


class WarmStartSolver:
    """``max_iter``, ``tol`` and ``warm_start`` (start from the previous solution ``w_prev``, same K; then saved state)."""

    _UNIFORM = ("w_prev",)  # a skipped first call leaves the uniform start, not zeros

    def _init_solver(self, name: str, max_iter: int, tol: float, warm_start: bool) -> None:
        self.max_iter = check_number(name, "max_iter", max_iter, low=1, integer=True)
        self.tol = check_number(name, "tol", tol)
        check_choice(name, "warm_start", warm_start, (True, False))
        self.warm_start = bool(warm_start)
        self.register_buffer("w_prev", None)

    def _start(self, k: int) -> torch.Tensor | None:
        """The previous solution when warm starting with the same K, else None (cold start)."""
        return self.w_prev if self.warm_start and self.w_prev is not None and self.w_prev.shape == (k,) else None

    def _remember(self, w: torch.Tensor) -> None:
        if self.warm_start:
            self.w_prev = w.detach()
