"""Two independent gradient samples in one call (MoDo, SDMGrad): E[J₁J₂ᵀ] = E[J]E[J]ᵀ, while
E[JJᵀ] carries the gradients' covariance. With ``double_sampling=True`` grads is [J₁; J₂]
([2K, D]), the weights use A = J₁J₂ᵀ and d is taken on ½(J₁ + J₂); otherwise A = JJᵀ."""

import torch

from morl.aggregators._checks import check_choice
from morl.solvers.gramian import gramian


class DoubleSampling:
    """Mixin: the ``double_sampling`` option and the simplex weights kept in buffer ``_WEIGHTS``."""

    _WEIGHTS = "w"  # a state buffer in the class's _UNIFORM: 1/K before the first call

    def _init_sampling(self, double_sampling: bool) -> None:
        check_choice(type(self).__name__, "double_sampling", double_sampling, (True, False))
        self.double_sampling = bool(double_sampling)
        # with two samples d is ½[w, w]·[J₁; J₂], not weights @ grads: wrappers (CR-MOGM) refuse it
        self.direction_is_weighted = not self.double_sampling

    def _cross_gramian(self, grads: torch.Tensor) -> torch.Tensor:
        """A (float64), J₁J₂ᵀ or JJᵀ."""
        if not self.double_sampling:
            return gramian(grads).to(torch.float64)
        if grads.shape[0] % 2:
            raise ValueError(
                f"{type(self).__name__} with double_sampling=True needs grads [2K, D] (two samples), got {grads.shape[0]} rows"
            )
        k = grads.shape[0] // 2
        return (grads[:k] @ grads[k:].transpose(0, 1)).to(torch.float64)

    def _direction(self, weights: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
        return torch.cat([weights, weights]) @ grads * 0.5 if self.double_sampling else weights @ grads

    def _previous(self, a: torch.Tensor) -> torch.Tensor:
        """The weights in A's dtype and device, 1/K before the first call."""
        return self._get(self._WEIGHTS, torch.diagonal(a))
