"""A new aggregator, in one file: the worked example of docs/architecture.md.

Unit-norm mean: every task's gradient is rescaled to the same length before averaging, so no
task dominates by scale, d = (max_k ‖g_k‖ / K) Σ_k g_k / ‖g_k‖. Its weights depend on the
gradients only through their Gramian G = J Jᵀ (w_k = 1 / (K √G_kk) on the G that the base
class has already divided by its largest diagonal entry), so it subclasses
``GramianAggregator``: the base class forms G in one pass, owns the non-finite policy, the
weights buffer, hooks, ``state_dict`` and ``.to(device)``. To ship it, put the class in
``morl/aggregators/unit_mean.py`` and add the pair ``("unit_mean", "UnitNormMean")`` to the
list ``REGISTRY`` is built from in ``morl/aggregators/__init__.py``, plus a row in ``tests/aggregator_cases.py``
(the contract suite then checks it). tests/test_examples.py runs exactly this file.
"""

from __future__ import annotations

import torch

from morl.aggregators.base import GramianAggregator


class UnitNormMean(GramianAggregator):
    """No options. Zero rows get weight 0 (a relative floor on √G_kk, no division by zero)."""

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        k = gram.shape[-1]
        norms = torch.diagonal(gram, dim1=-2, dim2=-1).clamp_min(0).sqrt()  # ‖g_k‖ / max ‖g‖
        tiny = torch.finfo(gram.dtype).eps
        return torch.where(norms > tiny, 1.0 / (k * norms.clamp_min(tiny)), torch.zeros_like(norms))

    def __repr__(self) -> str:
        return "UnitNormMean()"
