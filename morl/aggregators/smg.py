"""SMG (Liu & Vicente 2021, arXiv 1907.04472): MGDA on the stochastic gradients as they come.

Biased: λ* is nonlinear in the gradients, so E[d(ξ)] ≠ d(x) at a fixed batch size (arXiv
2210.12624 §1.3, eq. 4-5); MoCo (:mod:`morl.aggregators.moco`) tracks the gradients instead.
"""

from __future__ import annotations

from morl.aggregators.mgda import MGDA


class SMG(MGDA):
    """Stochastic multi-gradient: MGDA's computation under the name configurations mean. Stateless."""
