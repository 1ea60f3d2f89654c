"""SMG (Liu & Vicente, arXiv 1907.04472): MGDA on the stochastic gradients as they come; biased, as
λ* is nonlinear in the gradients (arXiv 2210.12624 §1.3, eq. 4-5)."""

from morl.aggregators.mgda import MGDA


class SMG(MGDA):
    """Stochastic multi-gradient: MGDA's computation. Stateless."""
