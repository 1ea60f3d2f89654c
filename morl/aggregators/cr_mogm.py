"""CR-MOGM (Zhou et al., NeurIPS 2022, "On the Convergence of Stochastic Multi-Objective Gradient
Manipulation and Beyond"): correlation-reduced weights around any weighting method.

    λ_t = α λ_{t−1} + (1 − α) λ̂_t,  d = Σ_k λ_t,k g_k   (λ̂_t: the base's weights; λ_0 = λ̂_1 as TorchJD).
"""

import torch

from morl.aggregators._checks import build_base, check_number
from morl.aggregators.base import Aggregator


class CRMOGM(Aggregator):
    """EMA of a base aggregator's weights; state ``lam`` (λ_{t−1}), ``calls``. Options: ``base`` ("mgda"):
    an aggregator whose direction is ``weights @ grads``; ``base_options`` (None); ``alpha`` (0.9, in [0, 1])."""

    _STATE = ("lam", "calls")
    _REPR = ("alpha", "base")

    def __init__(
        self, base: str = "mgda", base_options: dict | None = None, alpha: float = 0.9, check_finite: str = "raise"
    ) -> None:
        super().__init__(check_finite=check_finite)
        self.alpha = check_number("CRMOGM", "alpha", alpha, high=1.0)
        self.base_name = base
        self.base = build_base("CRMOGM", base, base_options)
        if not self.base.direction_is_weighted:
            from morl.aggregators import aggregator_class, available

            weighted = [n for n in available() if aggregator_class(n).direction_is_weighted]
            raise ValueError(
                f"CRMOGM option base={base!r} is not valid (its direction is not weights @ grads); allowed: {', '.join(weighted)}"
            )
        self.needs_losses = self.base.needs_losses

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        lam_hat = self.base._step_weights(grads, losses)  # the base's state advances as in a call
        if self.lam is None:
            lam, calls = lam_hat, torch.ones((), dtype=torch.int64, device=grads.device)
        else:  # calls == 0 after a skipped first call (the skip policy put the zeros back): λ_0 = λ̂_1
            ema = self.alpha * self._get("lam", lam_hat) + (1.0 - self.alpha) * lam_hat
            lam, calls = torch.where(self.calls > 0, ema, lam_hat), self.calls + 1
        self.lam, self.calls = lam.detach(), calls  # d keeps the graph; the state must not
        self.weights = lam
        return lam @ grads
