"""The contract every aggregator follows: K gradient rows in, one descent direction out."""

from __future__ import annotations

from typing import Any

import torch

from morl.solvers.gramian import gram_scale, gramian

CHECK_MODES = ("raise", "skip", "off")


def _finite_rows(grads: torch.Tensor) -> torch.Tensor:
    """[K] bools: row k has no NaN/inf. max/min propagate NaN and reach +-inf, and two
    reductions are ~100x cheaper on CPU than ``isfinite(grads).all(dim=1)``, which
    materialises a [K, D] bool tensor (TorchJD #376 hit the same cost)."""
    if grads.shape[1] == 0:
        return torch.ones(grads.shape[0], dtype=torch.bool, device=grads.device)
    return torch.isfinite(grads.amax(dim=1)) & torch.isfinite(grads.amin(dim=1))


def _all_finite(x: torch.Tensor) -> torch.Tensor:
    """0-d bool: no NaN/inf in ``x``. Two reductions (max/min propagate NaN and reach ±inf);
    ``isfinite(x).all()`` costs ~10x more on CPU (12 ms against 0.3 ms at 1e6 entries here)."""
    if x.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=x.device)
    return torch.isfinite(x.amax()) & torch.isfinite(x.amin())


def _bump(counter: torch.Tensor | None, flags: torch.Tensor) -> torch.Tensor:
    """``counter + Σ flags`` as an int64 device tensor (created on the first call)."""
    added = flags.sum().to(torch.int64) if flags.dim() else flags.to(torch.int64)
    return added if counter is None else counter + added


class Aggregator:
    """Maps a ``[K, D]`` matrix of per-objective gradients to one ``[D]`` direction to descend.

    Subclasses implement :meth:`aggregate`. Stateful ones (tracking variables, multipliers,
    step counters, random generators) list their tensor/int attributes in ``_state_keys`` so
    that :meth:`state_dict` / :meth:`load_state_dict` / :meth:`reset` treat every method alike.

    ``check_finite`` decides what happens to NaN/inf input:

    * ``"raise"`` (default): a ``ValueError`` naming the first bad objective. This reads one
      boolean back from the device, i.e. one host synchronisation per call.
    * ``"skip"``: no synchronisation. The returned direction is all zeros whenever any input
      entry (or the result) is non-finite (so the optimizer step does nothing) and ``nonfinite_steps``, a
      device tensor, counts such calls; read it at logging time.
    * ``"off"``: no check at all (caller guarantees finite input).

    The OUTPUT is checked under the same policy: with ``"raise"`` a non-finite direction from
    finite input raises ``ValueError`` (one more host read), with ``"skip"`` it is zeroed and
    counted. Iterative K×K solves that stop before their tolerance are counted in
    ``not_converged``; :attr:`stats` gathers both counters for logging.
    """

    #: True for methods that need the ``[K]`` loss vector (EPO-AL, loss-weighted MoCo).
    needs_losses: bool = False
    #: Names of attributes saved by ``state_dict``; tensors are cloned, the rest copied.
    _state_keys: tuple[str, ...] = ()

    def __init__(self, check_finite: str = "raise") -> None:
        if check_finite not in CHECK_MODES:
            raise ValueError(f"check_finite={check_finite!r} is not valid; allowed: {', '.join(CHECK_MODES)}")
        self.check_finite = check_finite
        self.weights: torch.Tensor | None = None
        self.nonfinite_steps: torch.Tensor | None = None
        self.not_converged: torch.Tensor | None = None

    # -- the call -------------------------------------------------------------------------
    def __call__(self, grads: torch.Tensor, losses: torch.Tensor | None = None) -> torch.Tensor:
        grads, losses = self._check_inputs(grads, losses)
        if self.check_finite == "skip":
            ok = self._input_finite_rows(grads).all()
            if losses is not None:
                ok = ok & torch.isfinite(losses).all()
            # The [K, D] input is not copied or sanitised (that costs as much as the method on
            # large D): the [D] output is zeroed instead, and stateful methods (MoCo, EPO-AL)
            # keep their state unchanged on such a call.
            direction = self.aggregate(grads, losses)
            ok = ok & _all_finite(direction)
            direction = torch.where(ok, direction, torch.zeros((), dtype=direction.dtype, device=direction.device))
            self.nonfinite_steps = _bump(self.nonfinite_steps, ~ok)
            return direction
        direction = self.aggregate(grads, losses)
        if self.check_finite == "raise" and not bool(_all_finite(direction)):
            raise ValueError(
                f"{type(self).__name__} produced a non-finite direction from finite gradients "
                f"(shape {tuple(grads.shape)}, {grads.dtype}); use check_finite='skip' to zero such steps"
            )
        return direction

    @property
    def stats(self) -> dict[str, torch.Tensor]:
        """Device-side counters for logging (no host sync until the caller reads them):
        ``nonfinite_steps`` (calls zeroed by ``check_finite="skip"``) and ``not_converged``
        (calls whose iterative K×K solve stopped at ``max_iter`` before its tolerance).
        Counters appear after the first call that can touch them."""
        names = ("nonfinite_steps", "not_converged")
        return {n: getattr(self, n) for n in names if getattr(self, n, None) is not None}

    def _count_not_converged(self, converged: torch.Tensor) -> None:
        """Add the number of unconverged solves in ``converged`` (bools) to ``not_converged``."""
        self.not_converged = _bump(self.not_converged, ~converged)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def _input_finite_rows(self, grads: torch.Tensor) -> torch.Tensor:
        """[K] bools for the non-finite policy (overridden where a cheaper test exists)."""
        return _finite_rows(grads)

    def _check_inputs(self, grads, losses):
        if not isinstance(grads, torch.Tensor):
            raise TypeError(f"grads must be a torch.Tensor of shape [K, D], got {type(grads).__name__}")
        if grads.dim() != 2 or grads.shape[0] < 1:
            raise ValueError(f"grads must have shape [K, D] with K >= 1, got {tuple(grads.shape)}")
        if not grads.is_floating_point():
            raise ValueError(f"grads must be a floating-point tensor, got dtype {grads.dtype}")
        if losses is not None:
            if not isinstance(losses, torch.Tensor):
                losses = torch.as_tensor(losses, dtype=grads.dtype, device=grads.device)
            losses = losses.reshape(-1)
            if losses.shape[0] != grads.shape[0]:
                raise ValueError(f"losses must have shape [K]={grads.shape[0]}, got {tuple(losses.shape)}")
            losses = losses.to(device=grads.device, dtype=grads.dtype)
        elif self.needs_losses:
            raise ValueError(f"{type(self).__name__} needs the [K] loss vector: call aggregator(grads, losses)")
        if self.check_finite == "raise":
            finite_rows = self._input_finite_rows(grads)
            if losses is not None:
                finite_rows = finite_rows & torch.isfinite(losses)
            if not bool(finite_rows.all()):
                k = int((~finite_rows).nonzero()[0, 0])
                what = "gradient" if not bool(torch.isfinite(grads[k]).all()) else "loss"
                raise ValueError(f"objective {k} has a non-finite (NaN/inf) {what}; all {grads.shape[0]} objectives must be finite")
        return grads, losses

    # -- state ----------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything learned across calls (tracking variables, multipliers, counters)."""
        self.weights = None
        self.nonfinite_steps = None
        self.not_converged = None

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for key in self._state_keys:
            value = getattr(self, key)
            if isinstance(value, torch.Tensor):
                value = value.detach().clone()
            elif isinstance(value, torch.Generator):
                value = value.get_state()
            state[key] = value
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = [k for k in self._state_keys if k not in state]
        if missing:
            raise KeyError(f"{type(self).__name__}.load_state_dict: missing keys {missing}")
        for key in self._state_keys:
            current = getattr(self, key, None)
            value = state[key]
            if isinstance(current, torch.Generator):
                current.set_state(value)
            elif isinstance(value, torch.Tensor):
                setattr(self, key, value.detach().clone())
            else:
                setattr(self, key, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class GramianAggregator(Aggregator):
    """An aggregator whose weights depend on the gradients only through the K×K Gramian.

    Subclasses implement :meth:`weights_from_gramian`; the direction is ``weights @ grads``.
    Users who already hold the Gramian (e.g. from a distributed all-reduce) can call
    :meth:`weights_from_gramian` directly.
    """

    _gram_of: tuple[torch.Tensor, torch.Tensor] | None = None

    def _input_finite_rows(self, grads: torch.Tensor) -> torch.Tensor:
        # Row k has a NaN/inf entry exactly when G_kk = Σ g_ki² is NaN/inf (barring overflow of
        # finite rows, which gramian() redoes safely on CPU), so the check reads the Gramian
        # that the method needs anyway instead of making two more passes over [K, D].
        gram = gramian(grads)
        self._gram_of = (grads, gram)
        return torch.isfinite(torch.diagonal(gram))

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        # One pass over [K, D] for G, then G / max diag: the methods' weights are scale-free in
        # G. G stays in the gradients' dtype so that solvers know how precisely it is known
        # (their ridges and tolerances are a few rounding units of it); they solve in float64.
        cached, self._gram_of = self._gram_of, None
        gram = cached[1] if cached is not None and cached[0] is grads else gramian(grads)
        gram = gram / gram_scale(gram)
        w = self.weights_from_gramian(gram).to(grads.dtype)
        self.weights = w
        return w @ grads

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
