"""The contract every aggregator follows: K gradient rows in, one descent direction out."""

from __future__ import annotations

import torch

from morl.solvers.gramian import gram_scale, gramian

CHECK_MODES = ("raise", "skip", "off")


def _all_finite(x: torch.Tensor) -> torch.Tensor:
    """0-d bool: no NaN/inf in ``x`` (one min/max pass: both propagate NaN and reach ±inf)."""
    if x.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=x.device)
    return torch.isfinite(torch.stack(torch.aminmax(x))).all()


def _raise_nonfinite_input(grads: torch.Tensor, losses: torch.Tensor | None) -> None:
    """The ``"raise"`` policy's error, naming the first objective with a NaN/inf gradient row or loss."""
    rows_ok = torch.isfinite(grads).all(dim=1)
    bad = ~rows_ok if losses is None else ~rows_ok | ~torch.isfinite(losses)
    if bool(bad.any()):
        k = int(bad.nonzero()[0, 0])
        what = "gradient" if not bool(rows_ok[k]) else "loss"
        raise ValueError(f"objective {k} has a non-finite (NaN/inf) {what}; all {grads.shape[0]} objectives must be finite")


def _bump(counter: torch.Tensor | None, flags: torch.Tensor) -> torch.Tensor:
    """``counter + Σ flags`` as an int64 device tensor (created on the first call)."""
    added = flags.sum().to(torch.int64) if flags.dim() else flags.to(torch.int64)
    return added if counter is None else counter + added


class Aggregator(torch.nn.Module):
    """Maps a ``[K, D]`` matrix of per-objective gradients to one ``[D]`` direction to descend.

    An ``nn.Module``: subclasses implement :meth:`aggregate`; ``agg(grads, losses)`` runs
    :meth:`forward`, which validates the input, applies the one non-finite policy below and
    runs any forward hooks. State that persists across calls (tracking variables, multipliers,
    warm starts) lives in buffers registered with ``register_buffer(name, None)`` and created
    lazily on the first call (their shape depends on K and D), so ``state_dict()``,
    ``load_state_dict()``, ``.to(device)`` and checkpoints treat every method alike.
    ``aggregate`` must assign new tensors to its buffers, never modify them in place (the skip
    policy keeps the previous ones). Plain-Python state goes through :meth:`get_extra_state`.

    ``check_finite`` decides what happens to NaN/inf input:

    * ``"raise"`` (default): a ``ValueError`` naming the first bad objective (one boolean read
      back from the device per call); a non-finite direction from finite input raises too.
    * ``"skip"``: no synchronisation. The direction is zeroed wherever the input or the result
      is non-finite, every persistent buffer keeps its value from before the call, and
      ``nonfinite_steps`` (a device int64 tensor) counts such calls.
    * ``"off"``: no check at all (the caller guarantees finite input).

    Every method runs the same torch code on every device, with no host read inside a call, so
    it compiles to one graph. The one exception is :func:`morl.host_reads.reads_are_free`: on
    the CPU outside ``torch.compile`` an iterative solver may read its convergence flag to stop
    early, since there the read costs nothing. Solves that stop at their iteration budget before
    their tolerance are counted in ``not_converged``; :attr:`stats` gathers both counters.
    """

    #: True for methods that need the ``[K]`` loss vector (EPO-AL, loss-weighted MoCo).
    needs_losses: bool = False
    #: False where the direction is the gradient of :meth:`weighted_loss` (Mean, loss
    #: weightings): learners then skip the per-task Jacobian and backpropagate that loss once.
    needs_grads: bool = True
    #: True where the learner must call ``agg.update(losses_after_step)`` after each step (FAMO).
    needs_losses_after_step: bool = False
    #: True when the direction is ``weights @ grads`` (so ``weights`` are coefficients of the
    #: rows, which wrappers such as CR-MOGM average); False for coordinate-wise methods
    #: (GradDrop, trimmed mean) and for MoCo, whose weights apply to its tracked gradients.
    direction_is_weighted: bool = True
    #: Buffers that count events; the skip policy never rolls them back.
    _COUNTERS = ("nonfinite_steps", "not_converged")

    def __init__(self, check_finite: str = "raise") -> None:
        super().__init__()
        if check_finite not in CHECK_MODES:
            raise ValueError(f"check_finite={check_finite!r} is not valid; allowed: {', '.join(CHECK_MODES)}")
        self.check_finite = check_finite
        self.register_buffer("weights", None, persistent=False)
        self.register_buffer("nonfinite_steps", None)
        self.register_buffer("not_converged", None)

    # -- the call -------------------------------------------------------------------------
    def forward(self, grads: torch.Tensor, losses: torch.Tensor | None = None) -> torch.Tensor:
        grads, losses = self._check_inputs(grads, losses)
        if self.check_finite == "skip":
            return self._skip_nonfinite(grads, losses)
        if self.check_finite == "raise":
            ok = _all_finite(grads) if losses is None else _all_finite(grads) & torch.isfinite(losses).all()
            if not bool(ok):
                _raise_nonfinite_input(grads, losses)
        direction = self.aggregate(grads, losses)
        if self.check_finite == "raise" and not bool(_all_finite(direction)):
            raise ValueError(
                f"{type(self).__name__} produced a non-finite direction from finite gradients "
                f"(shape {tuple(grads.shape)}, {grads.dtype}); use check_finite='skip' to zero such steps"
            )
        return direction

    def _skip_nonfinite(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        """The ``"skip"`` policy: aggregate, then zero the step and put the state back where the
        input or the output is non-finite, all on device flags (no sync)."""
        ok = _all_finite(grads)
        if losses is not None:
            ok = ok & torch.isfinite(losses).all()
        before = self._state_buffers()
        direction = self.aggregate(grads, losses)
        ok = ok & _all_finite(direction)
        self._keep_state_unless(ok, before)
        zero = torch.zeros((), dtype=direction.dtype, device=direction.device)
        direction = torch.where(ok, direction, zero)
        if self.weights is not None:  # the step taken is 0: so are the weights reported
            self.weights = torch.where(ok, self.weights, zero.to(self.weights.dtype))
        self.nonfinite_steps = _bump(self.nonfinite_steps, ~ok)
        return direction

    def _state_buffers(self) -> list[tuple[torch.nn.Module, str, torch.Tensor | None]]:
        """(module, name, value) of every persistent, non-counter buffer here and in submodules."""
        return [
            (m, name, value)
            for m in self.modules()
            for name, value in m._buffers.items()
            if name not in m._non_persistent_buffers_set and name not in self._COUNTERS
        ]

    def _keep_state_unless(self, ok: torch.Tensor, before) -> None:
        """Where ``ok`` is False (a device flag: no sync), put every buffer back as it was."""
        for module, name, old in before:
            new = module._buffers[name]
            if new is old or new is None:
                continue
            if old is None:
                old = module._initial_state(name, new)
            if old.shape == new.shape:
                module._buffers[name] = torch.where(ok, new, old.to(new))

    def _initial_state(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """The value buffer ``name`` takes before its first finite call (for the skip policy)."""
        return torch.zeros_like(like)

    @property
    def stats(self) -> dict[str, torch.Tensor]:
        """Device-side counters for logging (no host sync until the caller reads them):
        ``nonfinite_steps`` (calls zeroed by ``check_finite="skip"``) and ``not_converged``
        (solves that stopped at their iteration budget before their tolerance)."""
        return {n: getattr(self, n) for n in self._COUNTERS if getattr(self, n, None) is not None}

    def _count_not_converged(self, converged: torch.Tensor) -> None:
        """Add the number of unconverged solves in ``converged`` (bools) to ``not_converged``."""
        self.not_converged = _bump(self.not_converged, ~converged)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def _check_inputs(self, grads, losses):
        if not isinstance(grads, torch.Tensor):
            raise TypeError(f"grads must be a torch.Tensor of shape [K, D], got {type(grads).__name__}")
        if grads.dim() != 2 or grads.shape[0] < 1:
            raise ValueError(f"grads must have shape [K, D] with K >= 1, got {tuple(grads.shape)}")
        if grads.shape[1] < 1:
            raise ValueError(f"grads must have at least one column (D >= 1), got shape {tuple(grads.shape)}")
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
        return grads, losses

    # -- state ----------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything learned across calls (tracking variables, multipliers, counters).
        Subclasses with plain-Python state extend it; child aggregators are reset too."""
        for name in self._buffers:
            self._buffers[name] = None
        for child in self.children():
            if isinstance(child, Aggregator):
                child.reset()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # Buffers are created lazily with a shape known only at the first call: take each one
        # from the state as saved (absent = not created yet), then let nn.Module load the rest
        # (parameters, extra state) and report unexpected keys.
        for name, current in list(self._buffers.items()):
            if name in self._non_persistent_buffers_set:
                continue
            value = state_dict.get(prefix + name)
            if value is None:
                self._buffers[name] = None
            else:
                if not isinstance(value, torch.Tensor):
                    raise TypeError(f"{type(self).__name__}.load_state_dict: {prefix + name} must be a tensor, got {type(value).__name__}")
                device = current.device if current is not None else value.device
                self._buffers[name] = value.detach().clone().to(device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class GramianAggregator(Aggregator):
    """An aggregator whose weights depend on the gradients only through the K×K Gramian.

    Subclasses implement :meth:`weights_from_gramian`; the direction is ``weights @ grads``.
    Users who already hold the Gramian (e.g. from a distributed all-reduce) can call
    :meth:`weights_from_gramian` directly.
    """

    #: False: :meth:`weights_from_gramian` gets G / max_k G_kk (the weights of most methods are
    #: scale-free in G). True for methods whose weights live in the gradients' units (Nash-MTL
    #: and FairGrad: α ~ 1/‖g‖; PCD: a running average of ‖g_k‖²): they get G itself.
    gramian_in_units: bool = False

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        gram = gramian(grads)
        if not self.gramian_in_units:
            gram = gram / gram_scale(gram)
        w = self.weights_from_gramian(gram).to(grads.dtype)
        self.weights = w
        return w @ grads

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
