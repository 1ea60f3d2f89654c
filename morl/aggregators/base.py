"""The contract every aggregator follows: K gradient rows ``[K, D]`` in, one direction ``[D]`` to descend out."""

import math

import torch

from morl.solvers.gramian import gram_scale, gramian

CHECK_MODES = ("raise", "skip", "off")


def _all_finite(x: torch.Tensor) -> torch.Tensor:
    """0-d bool: no NaN/inf in ``x`` (one min/max pass: both propagate NaN and reach ±inf)."""
    return torch.isfinite(torch.stack(torch.aminmax(x))).all()


def _finite(x: torch.Tensor) -> bool:
    """No NaN/inf in ``x`` (host read): its sum is finite, or (the sum overflowed) every entry is."""
    return math.isfinite(x.sum().item()) or bool(_all_finite(x))


def _bump(counter: torch.Tensor | None, flags: torch.Tensor) -> torch.Tensor:
    """``counter + Σ flags`` as an int64 device tensor (created on the first call; a bool sum is int64)."""
    return flags.sum() + (0 if counter is None else counter)


def _shown(value) -> str:
    """An option as ``__repr__`` shows it: floats by ``:g``, host tensors (preferences) as rounded lists."""
    if isinstance(value, float):
        return f"{value:g}"
    return str([round(v, 6) for v in value.tolist()]) if isinstance(value, torch.Tensor) else repr(value)


def _raise_nonfinite_input(rows: torch.Tensor, grads: torch.Tensor, losses: torch.Tensor | None) -> None:
    """The "raise" error for the first objective whose gradient row or loss is NaN/inf, or for
    ``rows`` (G's diagonal) overflowing; returns when all is finite (only a sum overflowed)."""
    rows_ok = torch.isfinite(grads).all(dim=1)
    bad = ~rows_ok if losses is None else ~rows_ok | ~torch.isfinite(losses)
    if bool(bad.any()):
        k = int(bad.nonzero()[0, 0])
        what = "loss" if bool(rows_ok[k]) else "gradient"
        raise ValueError(
            f"objective {k} has a non-finite (NaN/inf) {what}; all {grads.shape[0]} objectives must be finite"
        )
    if not bool(_all_finite(rows)):
        raise ValueError(
            f"the gradients' Gramian overflows {grads.dtype} (a row norm above ~sqrt of its largest number); "
            "scale the losses down or aggregate in float64"
        )


class Aggregator(torch.nn.Module):
    """Maps ``[K, D]`` per-objective gradients to one ``[D]`` direction; subclasses implement :meth:`aggregate`.

    State kept across calls lives in buffers registered as ``None``, created on the first call and
    replaced (never edited in place) by ``aggregate``. ``check_finite`` ("raise"): "raise" names the
    first objective with NaN/inf input (one host read); "skip" zeroes the step, restores the buffers
    and counts ``nonfinite_steps`` on device; "off" checks nothing. Solves stopped at their
    iteration budget count in ``not_converged``.
    """

    needs_losses: bool = False  # needs the [K] loss vector
    needs_grads: bool = True  # False: the direction is the gradient of weighted_loss(losses)
    needs_losses_after_step: bool = False  # the learner calls agg.update(losses_after_step) (FAMO)
    direction_is_weighted: bool = True  # the direction is weights @ grads (what CR-MOGM averages)
    _COUNTERS = ("nonfinite_steps", "not_converged")  # never rolled back by "skip"
    _STATE: tuple[str, ...] = ()  # the buffers of state kept across calls (None until the first call)
    _UNIFORM: tuple[str, ...] = ()  # the state buffers that start at 1/K (the others at 0)
    _REPR: tuple[str, ...] = ()  # the options __repr__ shows

    def __init__(self, check_finite: str = "raise") -> None:
        super().__init__()
        if check_finite not in CHECK_MODES:
            raise ValueError(f"check_finite={check_finite!r} is not valid; allowed: {', '.join(CHECK_MODES)}")
        self.check_finite = check_finite
        self.register_buffer("weights", None, persistent=False)
        for name in ("nonfinite_steps", "not_converged", *self._STATE):
            self.register_buffer(name, None)

    def forward(self, grads: torch.Tensor, losses: torch.Tensor | None = None) -> torch.Tensor:
        grads, losses = self._check_inputs(grads, losses)
        if self.check_finite == "off":
            return self.aggregate(grads, losses)
        before = self._state_buffers() if self.check_finite == "skip" else None
        direction, ok = self._checked(grads, losses)
        if before is not None:
            return self._keep_finite(direction, ok & _all_finite(direction), before)
        if not _finite(direction):
            raise ValueError(
                f"{type(self).__name__} produced a non-finite direction from finite gradients "
                f"(shape {tuple(grads.shape)}, {grads.dtype}); use check_finite='skip' to zero such steps"
            )
        return direction

    def _checked(self, grads: torch.Tensor, losses: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(direction, the input check of :meth:`_input_ok`)."""
        ok = self._input_ok(grads, grads, losses)
        return self.aggregate(grads, losses), ok

    def _input_ok(self, rows: torch.Tensor, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor | None:
        """Under "skip", 0-d bool: ``rows`` (NaN/inf where a gradient row is) and the losses finite.
        Under "raise", None after raising on NaN/inf input, naming the culprit (one host read)."""
        if self.check_finite == "skip":
            return _all_finite(rows) if losses is None else _all_finite(rows) & torch.isfinite(losses).all()
        total = rows.sum() if losses is None else rows.sum() + losses.sum()
        if not math.isfinite(total.item()):
            _raise_nonfinite_input(rows, grads, losses)
        return None

    def _keep_finite(self, direction: torch.Tensor, ok: torch.Tensor, before: list) -> torch.Tensor:
        """Where ``ok`` is False, zero the step and put every buffer back (device flags, no sync)."""
        for module, name, old in before:
            new = module._buffers[name]
            if new is not old and new is not None:
                old = module._initial_state(name, new) if old is None else old
                if old.shape == new.shape:
                    module._buffers[name] = torch.where(ok, new, old.to(new))
        zero = torch.zeros((), dtype=direction.dtype, device=direction.device)
        if self.weights is not None:  # the step taken is 0: so are the weights reported
            self.weights = torch.where(ok, self.weights, zero)
        self.nonfinite_steps = _bump(self.nonfinite_steps, ~ok)
        return torch.where(ok, direction, zero)

    def _state_buffers(self) -> list[tuple[torch.nn.Module, str, torch.Tensor | None]]:
        """(module, name, value) of every persistent, non-counter buffer here and in submodules."""
        return [
            (m, name, value)
            for m in self.modules()
            for name, value in m._buffers.items()
            if name not in m._non_persistent_buffers_set and name not in self._COUNTERS
        ]

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """The value buffer ``name`` has before its first finite call (what "skip" puts back)."""
        return torch.full_like(like, 1.0 / like.shape[-1]) if name in self._UNIFORM else torch.zeros_like(like)

    def _get(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """Buffer ``name`` (initial state before the first call) in ``like``'s dtype and device."""
        value = getattr(self, name)
        if value is None:
            return self._initial_state(name, like)
        if value.shape != like.shape:
            raise ValueError(
                f"{type(self).__name__}: state {name!r} has shape {tuple(value.shape)} but this call needs "
                f"{tuple(like.shape)} (K changed?); call reset() first"
            )
        return value.to(device=like.device, dtype=like.dtype)

    @property
    def stats(self) -> dict[str, torch.Tensor]:
        """The device counters ``nonfinite_steps`` and ``not_converged`` that exist so far."""
        return {n: getattr(self, n) for n in self._COUNTERS if getattr(self, n, None) is not None}

    def _count_not_converged(self, converged: torch.Tensor) -> None:
        self.not_converged = _bump(self.not_converged, ~converged)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def _step_weights(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        """This call's ``weights``, the state advanced as by a call (for wrappers such as CR-MOGM)."""
        self.aggregate(grads, losses)
        return self.weights

    def _check_inputs(self, grads, losses):
        if not isinstance(grads, torch.Tensor):
            raise TypeError(f"grads must be a torch.Tensor of shape [K, D], got {type(grads).__name__}")
        if grads.dim() != 2 or 0 in grads.shape or not grads.is_floating_point():
            raise ValueError(
                f"grads must be a floating-point tensor of shape [K, D] with K >= 1 and at least one column "
                f"(D >= 1), got shape {tuple(grads.shape)}, dtype {grads.dtype}"
            )
        if losses is None:
            if self.needs_losses:
                raise ValueError(f"{type(self).__name__} needs the [K] loss vector: call aggregator(grads, losses)")
            return grads, None
        losses = torch.as_tensor(losses, dtype=grads.dtype, device=grads.device).reshape(-1)
        if losses.shape[0] != grads.shape[0]:
            raise ValueError(f"losses must have shape [K]={grads.shape[0]}, got {tuple(losses.shape)}")
        return grads, losses

    def reset(self) -> None:
        """Forget all state kept across calls, here and in child aggregators."""
        for name in self._buffers:
            self._buffers[name] = None
        for child in self.children():
            if isinstance(child, Aggregator):
                child.reset()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # Buffers have their shape only after the first call: take each as saved (absent = not yet created).
        for name, current in list(self._buffers.items()):
            if name in self._non_persistent_buffers_set:
                continue
            value = state_dict.get(prefix + name)
            if value is not None and not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"{type(self).__name__}.load_state_dict: {prefix + name} must be a tensor, got {type(value).__name__}"
                )
            if value is not None:
                value = value.detach().clone().to(value.device if current is None else current.device)
            self._buffers[name] = value
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={_shown(getattr(self, n))}' for n in self._REPR)})"


class GramianAggregator(Aggregator):
    """Weights from the K×K Gramian only (:meth:`weights_from_gramian`); the direction is ``weights @ grads``."""

    #: True: weights_from_gramian gets G itself, not G / max diag (Nash-MTL, FairGrad, PCD)
    gramian_in_units: bool = False

    def _checked(self, grads: torch.Tensor, losses: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        # row k holds NaN/inf exactly when G_kk does (or overflows): the Gramian the method needs anyway
        # replaces a pass over [K, D]
        gram = gramian(grads)
        ok = self._input_ok(torch.diagonal(gram), grads, losses)
        return self._direction(gram, grads), ok

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        return self._direction(gramian(grads), grads)

    def _step_weights(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        return self._weights(gramian(grads), grads.dtype)  # no pass of weights @ grads

    def _direction(self, gram: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
        return self._weights(gram, grads.dtype) @ grads

    def _weights(self, gram: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if not self.gramian_in_units:
            gram = gram / gram_scale(gram)
        self.weights = self.weights_from_gramian(gram).to(dtype)
        return self.weights

    def gramian_weights(self, gram: torch.Tensor, losses: torch.Tensor | None = None) -> torch.Tensor:
        """The weights w [K] that :meth:`forward` would apply to rows J with ``J Jᵀ = gram``
        (direction ``w @ J``), with the same state updates and ``check_finite`` rule. For callers
        that form G without J (``morl.backward(..., gramian=...)``)."""
        if not isinstance(gram, torch.Tensor) or gram.dim() != 2 or gram.shape[0] != gram.shape[1]:
            raise ValueError(f"gram must be a square [K, K] tensor, got {getattr(gram, 'shape', type(gram).__name__)}")
        diag = torch.diagonal(gram)[:, None]  # row k is finite exactly when G_kk is: stands in for J's rows
        diag, losses = self._check_inputs(diag, losses)
        if self.check_finite == "off":
            return self._weights(gram, gram.dtype)
        before = self._state_buffers() if self.check_finite == "skip" else None
        ok = self._input_ok(diag[:, 0], diag, losses)
        weights = self._weights(gram, gram.dtype)
        if before is not None:
            return self._keep_finite(weights, ok & _all_finite(weights), before)
        if not _finite(weights):
            raise ValueError(
                f"{type(self).__name__} produced non-finite weights from a finite Gramian "
                f"(K={gram.shape[0]}, {gram.dtype}); use check_finite='skip' to zero such steps"
            )
        return weights

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
