"""SMG (Liu & Vicente 2021): MGDA applied to stochastic gradients as they come.

The computation is exactly :class:`~morl.aggregators.mgda.MGDA`'s; the class exists so that
configurations say what they mean. Its known defect (MoCo paper §1.3, eq. 4–5): λ* is a
nonlinear function of the gradients, so with noisy g_k the expected direction E[d(ξ)] differs
from the true MGDA direction d(x) and the error does not shrink with more iterations at a
fixed batch size. Liu & Vicente need growing batches; MoCo (:mod:`morl.aggregators.moco`)
tracks the gradients instead.
"""

from __future__ import annotations

from morl.aggregators.mgda import MGDA


class SMG(MGDA):
    """Stochastic multi-gradient: min-norm weights of the stochastic gradients. Stateless, biased."""
