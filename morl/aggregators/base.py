"""The contract every aggregator follows: K gradient rows in, one descent direction out."""

from __future__ import annotations

import math

import torch

from morl.aggregators._host import eps
from morl.solvers.gramian import gram_scale, gramian_and_top

CHECK_MODES = ("raise", "skip", "off")


def _finite_rows(grads: torch.Tensor) -> torch.Tensor:
    """[K] bools: row k has no NaN/inf. Only to name the first bad row once a whole-matrix test
    failed. amin and amax propagate NaN and reach ±inf; ``torch.aminmax(grads, dim=1)`` gives
    the same but is 5-10x slower than the two reductions on a Zen 1 (12.6 against 2.7 ms at
    K = 10, D = 344 008), and ``isfinite(grads).all(dim=1)`` materialises a [K, D] bool tensor."""
    if grads.shape[1] == 0:
        return torch.ones(grads.shape[0], dtype=torch.bool, device=grads.device)
    return torch.isfinite(grads.amin(dim=1)) & torch.isfinite(grads.amax(dim=1))


def _all_finite(x: torch.Tensor) -> torch.Tensor:
    """0-d bool: no NaN/inf in ``x``. One min/max reduction (both propagate NaN and reach ±inf);
    ``isfinite(x).all()`` costs ~20x more on CPU at 1e6 entries (it materialises the bools),
    and two separate reductions cost one more pass and more per-call overhead at small sizes."""
    if x.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=x.device)
    return torch.isfinite(torch.stack(torch.aminmax(x))).all()


def _raise_nonfinite_input(grads: torch.Tensor, losses: torch.Tensor | None) -> None:
    """The ``"raise"`` policy's error, naming the first objective with a NaN/inf gradient row or
    loss. Nothing is raised when every row and loss is finite after all (a Gramian entry that
    overflowed from finite rows off the CPU): the method runs and the output check decides."""
    rows = _finite_rows(grads)
    if losses is not None:
        rows = rows & torch.isfinite(losses)
    bad = (~rows).nonzero()
    if bad.numel():
        k = int(bad[0, 0])
        what = "gradient" if not bool(torch.isfinite(grads[k]).all()) else "loss"
        raise ValueError(f"objective {k} has a non-finite (NaN/inf) {what}; all {grads.shape[0]} objectives must be finite")


def _rows_finite_given(gram: torch.Tensor, top: float | None) -> torch.Tensor | bool:
    """Which rows are finite, from their Gramian: row k has a NaN/inf entry exactly when G_kk
    is NaN/inf. ``top`` (the largest G_kk read as a float, :func:`gramian_and_top`) is not
    None only when it is finite, and amax propagates NaN, so then every row is: ``True``,
    with no more tensor ops (a fifth of a K = 2, D = 1e4 call went to the [K] test and its
    read)."""
    return True if top is not None else torch.isfinite(torch.diagonal(gram))


#: From this many columns (CPU, two rows) a direction whose two weights sum to 1 is formed as
#: ``torch.lerp(g₀, g₁, w₁)``: one elementwise pass where MKL's gemv for w J with two rows
#: streams at ~6-9 GB/s on a Zen 1 (session 18, medians of interleaved calls, lerp / w @ J: 0.99
#: at D = 1e5, 0.75-0.82 at 3.4e5, 0.65-0.79 at 1e6 over five runs, 0.63-0.65 at 3e6; 1.15-1.44
#: below 3e4).
LERP_MIN_D = 2**17


def _long_pair(grads: torch.Tensor) -> bool:
    """Two rows of at least LERP_MIN_D columns: where lerp beats w @ J."""
    return grads.shape[0] == 2 and grads.shape[1] >= LERP_MIN_D


def _constant_weights(w: torch.Tensor) -> bool:
    """One weight vector that needs no gradient: the direction may then be formed from its
    values as floats (a copy of a row, lerp's weight), through which none would flow to w; the
    rows' gradients are w's, as through w @ J."""
    return w.dim() == 1 and not w.requires_grad


def _unit_row(values: list[float], grads: torch.Tensor) -> torch.Tensor | None:
    """Row k itself (a copy) when w is the k-th unit vector: Krum's selection, MGDA, IMTL-G and
    every other method at a vertex. w @ J gives that row exactly too (1·x and the sums of
    zeros are exact; only a −0 entry comes out +0), reading all K rows; the copy reads one.
    Zen 1, 1 thread, medians of repeated calls (session 19): 9 against 20 µs at K = 10,
    D = 1e4 (18 against 35 inside a call, after the product); 0.6 against 3.3 ms at K = 10,
    D = 1e6 and against 13 ms at K = 50. None otherwise (NaN never counts)."""
    if values.count(1.0) != 1 or values.count(0.0) != len(values) - 1:
        return None
    return grads[values.index(1.0)].clone()


def _convex_pair(values: list[float], grads: torch.Tensor) -> torch.Tensor | None:
    """w₀g₀ + w₁g₁ as g₀ + w₁(g₁ − g₀) when w₀ + w₁ = 1 to the rounding of the weights' dtype
    (two units: MGDA's, IMTL-G's and CR-MOGM's weights, which sum to 1 by construction): w₀ is
    then taken as 1 − w₁, within that rounding, and so is the direction. None otherwise."""
    w0, w1 = values
    if not abs(w0 + w1 - 1.0) <= 2.0 * eps(grads.dtype):
        return None
    return torch.lerp(grads[0], grads[1], w1)


def _bump(counter: torch.Tensor | None, flags: torch.Tensor) -> torch.Tensor:
    """``counter + Σ flags`` as an int64 device tensor (created on the first call)."""
    added = flags.sum().to(torch.int64) if flags.dim() else flags.to(torch.int64)
    return added if counter is None else counter + added


class Aggregator(torch.nn.Module):
    """Maps a ``[K, D]`` matrix of per-objective gradients to one ``[D]`` direction to descend.

    An ``nn.Module``: subclasses implement :meth:`aggregate`; ``agg(grads, losses)`` runs
    :meth:`forward`, which owns the one non-finite policy below, and any forward hooks (for
    timing or logging weights, e.g. ``agg.register_forward_hook(...)``). State that persists
    across calls (tracking variables, multipliers, warm starts) lives in buffers registered
    with ``register_buffer(name, None)`` and created lazily on the first call (their shape
    depends on K and D), so ``state_dict()``, ``load_state_dict()``, ``.to(device)`` and
    checkpoints treat every method alike. ``aggregate`` must assign new tensors to its buffers,
    never modify them in place (the skip policy below keeps the previous ones). Plain-Python
    state (counters, random generators) goes through :meth:`get_extra_state`.

    ``check_finite`` decides what happens to NaN/inf input:

    * ``"raise"`` (default): a ``ValueError`` naming the first bad objective. This reads one
      boolean back from the device, i.e. one host synchronisation per call.
    * ``"skip"``: no synchronisation. The returned direction is all zeros whenever any input
      entry (or the result) is non-finite, so the optimizer step does nothing; every buffer
      keeps its value from before the call; ``nonfinite_steps``, a device tensor, counts such
      calls (read it at logging time).
    * ``"off"``: no check at all (caller guarantees finite input).

    The OUTPUT is checked under the same policy: with ``"raise"`` a non-finite direction from
    finite input raises ``ValueError`` (one more host read), with ``"skip"`` it is zeroed and
    counted. Iterative K×K solves that stop before their tolerance are counted in
    ``not_converged``; :attr:`stats` gathers both counters for logging.
    """

    #: True for methods that need the ``[K]`` loss vector (EPO-AL, loss-weighted MoCo).
    needs_losses: bool = False
    #: False for loss weightings: their weights depend on the losses only, so learners skip
    #: the per-task Jacobian and backpropagate ``weights · losses`` once (see LossWeighting).
    needs_grads: bool = True
    #: True for methods whose state steps on the losses measured after the network's step
    #: (FAMO): learners then call ``update(losses_after)`` on the same batch.
    needs_losses_after_step: bool = False
    #: True when the direction is ``weights @ grads`` (so ``weights`` are coefficients of the
    #: rows, which wrappers such as CR-MOGM average); False for coordinate-wise methods
    #: (GradDrop, trimmed mean) and for MoCo, whose weights apply to its tracked gradients.
    direction_is_weighted: bool = True
    #: True where every input entry reaches the direction through a sum with a nonzero
    #: coefficient (Mean): NaN and ±inf survive IEEE sums, so a finite direction proves a finite
    #: input and the input needs no pass of its own; a non-finite one is then traced to its row.
    output_reveals_input: bool = False
    #: Buffers that count events; the skip policy never rolls them back.
    _COUNTERS = ("nonfinite_steps", "not_converged")
    #: (direction, grads, weights, largest diag of J Jᵀ as a float) of the last call, for
    #: _output_finite; set on CPU only (where that float was read anyway)
    _out_bound: tuple[torch.Tensor, torch.Tensor, torch.Tensor, float] | None = None
    #: a direction whose entries are bounded by this is finite, with room for the rounding of
    #: G's diagonal and of the sums in w @ J (a factor 16 on |d_i|, 256 on G)
    _OUT_LIMIT = {dt: torch.finfo(dt).max / 16 for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}

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
        direction = self.aggregate(grads, losses)
        if self.check_finite == "raise" and not bool(self._output_finite(direction, grads)):
            if self.output_reveals_input:  # the input was not checked: name its bad row, if any
                _raise_nonfinite_input(grads, losses)
            raise ValueError(
                f"{type(self).__name__} produced a non-finite direction from finite gradients "
                f"(shape {tuple(grads.shape)}, {grads.dtype}); use check_finite='skip' to zero such steps"
            )
        return direction

    def _skip_nonfinite(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        """The ``"skip"`` policy: aggregate, then zero the step and put the state back where the
        input or the output is non-finite, all on device flags (no sync). When both checks are
        known to pass on the host (``True``: a CPU Gramian read anyway), nothing is masked."""
        ok = self._input_finite_rows(grads)
        if ok is not True:
            ok = ok.all()
        if losses is not None:
            ok = ok & torch.isfinite(losses).all()
        # The [K, D] input is not copied or sanitised (that costs as much as the method on
        # large D): the [D] output is zeroed instead and the state put back where it was.
        before = self._state_buffers()
        direction = self.aggregate(grads, losses)
        out_ok = self._output_finite(direction, grads)
        if ok is True and out_ok is True:
            if self.nonfinite_steps is None:  # the counter exists after the first call
                self.nonfinite_steps = torch.zeros((), dtype=torch.int64, device=direction.device)
            return direction
        ok = ok & out_ok
        self._keep_state_unless(ok, before)
        direction = torch.where(ok, direction, torch.zeros((), dtype=direction.dtype, device=direction.device))
        if self.weights is not None:  # the step taken is 0: so are the weights reported
            self.weights = torch.where(ok, self.weights, torch.zeros((), dtype=self.weights.dtype, device=self.weights.device))
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
        (calls whose iterative K×K solve stopped at ``max_iter`` before its tolerance).
        Counters appear after the first call that can touch them."""
        return {n: getattr(self, n) for n in self._COUNTERS if getattr(self, n, None) is not None}

    def _count_not_converged(self, converged: torch.Tensor) -> None:
        """Add the number of unconverged solves in ``converged`` (bools) to ``not_converged``."""
        self.not_converged = _bump(self.not_converged, ~converged)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def _input_finite_rows(self, grads: torch.Tensor) -> torch.Tensor | bool:
        """Bools whose ``all()`` says every row is finite, for the non-finite policy: [K] (one per
        row), 0-d (the whole matrix: here, one min/max pass), or ``True`` when that is known
        without reading anything more (overridden where a cheaper test exists)."""
        return True if self.output_reveals_input else _all_finite(grads)

    def _weighted(self, w: torch.Tensor, grads: torch.Tensor, top: float | None) -> torch.Tensor:
        """``w @ grads``, remembering what :meth:`_output_finite` needs when ``top`` (the
        largest diagonal entry of grads @ grads.T, read on CPU) is known."""
        constant = _constant_weights(w)
        lerp, bound = constant and _long_pair(grads), self.check_finite != "off"  # "off" would never release it
        if top is None or not (lerp or bound):
            return w @ grads
        values = w.detach().tolist()  # on the CPU (top known): free, and read once for all uses
        direction = _unit_row(values, grads) if constant else None
        if direction is None and lerp:
            direction = _convex_pair(values, grads)
        if direction is None:
            direction = w @ grads
        if bound:
            self.__dict__["_out_bound"] = (direction, grads, values, top)
        return direction

    def _output_finite(self, direction: torch.Tensor, grads: torch.Tensor) -> torch.Tensor | bool:
        """0-d bool: ``direction`` (computed from the finite ``grads``) has no NaN/inf; ``True``
        when a host-side bound proves it (nothing to mask then)."""
        # A min/max pass over [D], unless the direction came from _weighted with a known scale:
        # d = wᵀJ with finite rows: |d_i| ≤ Σ_k |w_k| |J_ki| ≤ ‖w‖₁ · max_k sqrt(G_kk), so when
        # that bound is far below the dtype's largest number d is finite: a K-sized test instead
        # of a pass over [D] (0.3 of a 1 ms call at K = 2, D = 1e6). Only on CPU, where the
        # largest G_kk was already read as a float, so reading w is no synchronisation (as a
        # list: one op, ~6x cheaper than a torch sum and .item() at K ≤ 100); when the bound
        # fails (huge weights or rows) the exact [D] pass decides.
        bound = self.__dict__.pop("_out_bound", None)
        if bound is not None and bound[0] is direction and bound[1] is grads and direction.dtype in self._OUT_LIMIT:
            l1 = sum(map(abs, bound[2]))
            if l1 * math.sqrt(bound[3]) < self._OUT_LIMIT[direction.dtype]:  # False for NaN
                return True
        return _all_finite(direction)

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
            finite = self._input_finite_rows(grads)
            if losses is not None:  # one read for both
                losses_ok = torch.isfinite(losses).all()
                finite = losses_ok if finite is True else finite.all() & losses_ok
            if finite is not True and not bool(finite.all()):
                _raise_nonfinite_input(grads, losses)
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

    _gram_of: tuple[torch.Tensor, torch.Tensor, float | None] | None = None
    #: False: :meth:`weights_from_gramian` gets G / max_k G_kk (the weights of most methods are
    #: scale-free in G). True for methods whose weights live in the gradients' units (Nash-MTL
    #: and FairGrad: α ~ 1/‖g‖; PCD: a running average of ‖g_k‖²): they get G itself.
    gramian_in_units: bool = False
    #: gram_scale's threshold (sqrt of the smallest normal number) per dtype, looked up once
    _TINY_SCALE = {dt: torch.finfo(dt).tiny ** 0.5 for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}

    def _input_finite_rows(self, grads: torch.Tensor) -> torch.Tensor:
        # Row k has a NaN/inf entry exactly when G_kk = Σ g_ki² is NaN/inf (barring overflow of
        # finite rows, which gramian() redoes safely on CPU), so the check reads the Gramian
        # that the method needs anyway instead of making two more passes over [K, D].
        gram, top = gramian_and_top(grads)
        # plain instance attribute, set past nn.Module.__setattr__ (~7 µs a call, 5 % at K = 2)
        self.__dict__["_gram_of"] = (grads, gram, top)
        return _rows_finite_given(gram, top)

    def aggregate(self, grads: torch.Tensor, losses: torch.Tensor | None) -> torch.Tensor:
        w, top = self._gram_weights(grads)
        self._buffers["weights"] = w  # the registered buffer, as nn.Module.__setattr__ would set it
        return self._weighted(w, grads, top)

    def _cached_gramian(self, grads: torch.Tensor) -> tuple[torch.Tensor, float | None]:
        """(G, its largest diagonal entry as a float or None): the input check's, or formed now."""
        cached = self.__dict__.pop("_gram_of", None)
        return cached[1:] if cached is not None and cached[0] is grads else gramian_and_top(grads)

    def _gram_weights(self, grads: torch.Tensor) -> tuple[torch.Tensor, float | None]:
        """(weights in the gradients' dtype, largest G_kk as a float or None) for this call:
        everything but the product wᵀJ (wrappers such as CR-MOGM form their own)."""
        # One pass over [K, D] for G, then G / max diag: the methods' weights are scale-free in
        # G. G stays in the gradients' dtype so that solvers know how precisely it is known
        # (their ridges and tolerances are a few rounding units of it); they solve in float64.
        gram, top = self._cached_gramian(grads)
        if not self.gramian_in_units:
            # on CPU the largest diagonal entry was already read as a float: divide by it directly
            gram = gram / (top if top is not None and top > self._TINY_SCALE[gram.dtype] else gram_scale(gram))
        w = self.weights_from_gramian(gram)
        if w.dtype != grads.dtype:
            w = w.to(grads.dtype)
        return w, top

    def weights_from_gramian(self, gram: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

