"""CR-MOGM (Zhou et al., NeurIPS 2022, "On the Convergence of Stochastic Multi-Objective Gradient
Manipulation and Beyond"): correlation-reduced weights around any weighting method.

With λ̂_t the weights the base method computes from this call's gradients,

    λ_t = α λ_{t−1} + (1 − α) λ̂_t,     d = Σ_k λ_t,k g_k,

so the weights no longer depend on the current stochastic gradients alone (the paper's cause
of non-convergence). λ_0 = λ̂_1: the first call returns the base's direction (as TorchJD's
``CRMOGMWeighting`` without ``initial_weights``).
"""

from __future__ import annotations

import torch

from morl.aggregators._checks import check_number
from morl.aggregators.base import Aggregator


class CRMOGM(Aggregator):
    """EMA of a base aggregator's weights. Stateful: ``lam`` ([K], λ_{t−1}) and ``calls``.

    Options: ``base`` ("mgda"; any registered aggregator whose direction is ``weights @ grads``:
    every Gramian method, the loss weightings, EPO-AL, ...), ``base_options`` (its options),
    ``alpha`` (0.9, in [0, 1]; 0 = the base, 1 = the first call's weights forever). ``alpha`` is
    a plain attribute: set it between calls for a schedule (the paper's Corollary 1 lets α_t
    grow towards 1 as the learning rate decays).
    """

    def __init__(self, base: str = "mgda", base_options: dict | None = None, alpha: float = 0.9, check_finite: str = "raise") -> None:
        super().__init__(check_finite=check_finite)
        check_number("CRMOGM", "alpha", alpha)
        if alpha > 1:
            raise ValueError(f"CRMOGM option alpha={alpha!r} is not valid; allowed: a number in [0, 1]")
        self.alpha = float(alpha)
        self.base_name = base
        self.base = _build_base(base, base_options)
        self.needs_losses = self.base.needs_losses
        self.register_buffer("lam", None)
        self.register_buffer("calls", None)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        self.base(grads, losses)  # the base's state advances as in a call of it
        lam_hat = self.base.weights.to(grads.dtype)
        k = grads.shape[0]
        if self.lam is None:
            lam, calls = lam_hat, torch.ones((), dtype=torch.int64, device=grads.device)
        else:
            if self.lam.shape != (k,):
                raise ValueError(f"CRMOGM holds weights for K={self.lam.shape[0]} objectives but got K={k}; call reset() to start over")
            prev = self.lam.to(lam_hat)
            # calls == 0 after a skipped first call (the skip policy put the zeros back): λ_0 = λ̂_1
            lam = torch.where(self.calls > 0, self.alpha * prev + (1.0 - self.alpha) * lam_hat, lam_hat)
            calls = self.calls + 1
        self.lam, self.calls = lam.detach(), calls  # d keeps the graph; the state must not
        self.weights = lam
        return lam @ grads

    def __repr__(self) -> str:
        return f"CRMOGM(alpha={self.alpha:g}, base={self.base!r})"


def _build_base(base: str, base_options: dict | None) -> Aggregator:
    from morl.aggregators import available, build

    if not isinstance(base, str) or base not in available():
        raise ValueError(f"CRMOGM option base={base!r} is not valid; allowed: {', '.join(available())}")
    if base_options is not None and not isinstance(base_options, dict):
        raise ValueError(f"CRMOGM option base_options must be a dict of options for {base!r}, got {type(base_options).__name__}")
    try:
        agg = build(base, **{"check_finite": "off", **(base_options or {})})  # the wrapper checks its input
    except ValueError as err:
        raise ValueError(f"CRMOGM option base_options: {err}") from None
    if not agg.direction_is_weighted:
        weighted = [n for n in available() if getattr(_class_of(n), "direction_is_weighted", True)]
        raise ValueError(f"CRMOGM option base={base!r} is not valid (its direction is not weights @ grads); allowed: {', '.join(weighted)}")
    return agg


def _class_of(name: str):
    from morl.aggregators import aggregator_class

    try:
        return aggregator_class(name)
    except ImportError:  # a broken module elsewhere must not hide this message
        return None
