"""Per-objective gradients and writing an aggregated direction back into ``.grad``.

Three ways to get the ``[K, D]`` matrix of per-objective gradients (D = number of shared
parameter entries, in the order the parameters are given):

* :func:`per_task_grads` -- any ``[K]`` loss vector built with autograd: the K rows of its
  Jacobian in ONE batched backward (``is_grads_batched``), falling back to K backward passes
  when an operation in the graph has no batching rule.
* :func:`batched_task_grads` -- the multi-task fast path when the K losses come from disjoint
  slices of one batch: ``torch.func.vmap`` over ``grad_and_value`` of a one-task loss, i.e.
  one batched forward/backward instead of K.
* the K-backward-pass loop (``batched=False`` in :func:`per_task_grads`), for reference.

:func:`task_features` gives each task its own view of a shared representation z, so that the
``[K, z.numel()]`` gradients w.r.t. z come from ONE backward of ``Σ_k L_k`` through each head once.

:func:`backward` chains gradients -> aggregator -> ``.grad`` so that any ``torch.optim``
optimizer can step afterwards ("plug an aggregator into my own loop").
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence

import torch

from morl.aggregators.base import Aggregator, GramianAggregator, _all_finite
from morl.gramian_tape import GramianTape, streamed_gramian

__all__ = [
    "flatten",
    "unflatten",
    "write_grads",
    "per_task_grads",
    "task_features",
    "TaskFeatures",
    "backward",
    "batched_task_grads",
]


def _as_param_list(params) -> list[torch.Tensor]:
    if isinstance(params, torch.nn.Module):
        params = params.parameters()
    elif isinstance(params, Mapping):
        params = params.values()
    elif isinstance(params, torch.Tensor):
        params = [params]
    params = list(params)
    if not params:
        raise ValueError("params is empty: pass the tensors (or a Module) whose gradients you want")
    for i, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"params[{i}] is a {type(p).__name__}, expected a torch.Tensor")
    return params


def flatten(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """Concatenate tensors into one 1-D vector (the layout every ``[K, D]`` row uses)."""
    return torch.cat([t.reshape(-1) for t in tensors])


def unflatten(flat: torch.Tensor, like: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """Split a 1-D vector back into tensors shaped like ``like`` (inverse of :func:`flatten`)."""
    like = list(like)
    sizes = [t.numel() for t in like]
    if flat.dim() != 1 or flat.numel() != sum(sizes):
        raise ValueError(f"flat must be a 1-D tensor with {sum(sizes)} entries, got shape {tuple(flat.shape)}")
    return [chunk.view_as(t) for chunk, t in zip(torch.split(flat, sizes), like)]


def write_grads(params, flat_direction: torch.Tensor, *, accumulate: bool = True) -> None:
    """Write a flat ``[D]`` direction into each parameter's ``.grad``.

    With ``accumulate=True`` (default) it adds to an existing ``.grad`` like autograd does,
    so call ``optimizer.zero_grad()`` first as usual.
    """
    params = _as_param_list(params)
    for p, g in zip(params, unflatten(flat_direction.detach(), params)):
        g = g.to(dtype=p.dtype, device=p.device)
        if accumulate and p.grad is not None:
            p.grad.add_(g)
        else:
            p.grad = g.clone()


def _check_losses(losses: torch.Tensor) -> torch.Tensor:
    if not isinstance(losses, torch.Tensor):
        raise TypeError(f"losses must be a torch.Tensor of shape [K], got {type(losses).__name__}")
    if losses.dim() != 1 or losses.shape[0] < 1:
        raise ValueError(f"losses must be a 1-D tensor of K >= 1 objectives, got shape {tuple(losses.shape)}")
    if not losses.requires_grad:
        raise ValueError("losses does not require grad: build it from the parameters with autograd enabled")
    return losses


def _trainable(params) -> list[torch.Tensor]:
    params = _as_param_list(params)
    bad = [i for i, p in enumerate(params) if not p.requires_grad]
    if bad:
        raise ValueError(f"params {bad} do not require grad; pass only trainable tensors")
    return params


def _stack_rows(rows: Sequence[torch.Tensor | None], params: list[torch.Tensor], k: int) -> torch.Tensor:
    # Parameters no loss reaches get zero columns, so D always equals the total parameter size.
    cols = [
        torch.zeros(k, p.numel(), dtype=p.dtype, device=p.device) if g is None else g.reshape(k, -1)
        for g, p in zip(rows, params)
    ]
    return torch.cat(cols, dim=1)


def _warn_unreached(objectives: Sequence[int]) -> None:
    """A zero row because autograd found no path is a wiring bug, not a zero gradient: say so."""
    if objectives:
        warnings.warn(
            f"objectives {list(objectives)} do not reach the parameters (autograd found no path): their "
            "gradient is zero; pass the parameters the losses are computed from",
            UserWarning,
            stacklevel=3,
        )


def per_task_grads(losses: torch.Tensor, params, *, retain_graph: bool = False, batched: bool = True) -> torch.Tensor:
    """The ``[K, D]`` Jacobian of the loss vector w.r.t. the flattened ``params``.

    ``batched=True`` computes all K rows in one vmapped backward
    (``torch.autograd.grad(..., is_grads_batched=True)``); if that raises (an operation in
    the graph without a batching rule) it falls back to K backward passes. Parameters that
    no loss reaches get zero columns; objectives that reach none of them are named in a
    ``UserWarning``. ``retain_graph`` as in ``torch.autograd.grad``.

    ``params=morl.task_features(z, K)``: the ``[K, z.numel()]`` gradients w.r.t. ``z``, row k
    read at view k, from ONE backward of ``Σ_k L_k`` (each head once, not K one-hot rows
    through every head); loss k must read ``z`` through view k only (:func:`task_features`).
    """
    losses = _check_losses(losses)
    if isinstance(params, TaskFeatures):
        return _view_rows(losses, params, retain_graph)
    params = _trainable(params)
    k = losses.shape[0]
    if batched and k > 1:
        eye = torch.eye(k, dtype=losses.dtype, device=losses.device)
        try:
            rows = torch.autograd.grad(
                losses, params, grad_outputs=eye, is_grads_batched=True, retain_graph=retain_graph, allow_unused=True
            )
        except RuntimeError as batched_error:
            try:
                return _loop_grads(losses, params, retain_graph)
            except RuntimeError as loop_error:
                raise RuntimeError(
                    "per_task_grads: the batched backward failed and the K-pass fallback could not reuse the "
                    f"graph ({loop_error}); call per_task_grads(..., batched=False) for this model"
                ) from batched_error
        _warn_unreached(range(k) if all(g is None for g in rows) else ())
        return _stack_rows(rows, params, k)
    return _loop_grads(losses, params, retain_graph)


class TaskFeatures(tuple):
    """K views of one shared representation, one per task (made by :func:`task_features`);
    ``shared`` is the tensor they view."""

    shared: torch.Tensor


def task_features(z: torch.Tensor, k: int) -> TaskFeatures:
    """K views of the shared representation ``z`` (e.g. the trunk output) that autograd keeps
    apart: feed ``zs[k]`` to task k's head and ``z`` to nothing else. Then
    ``morl.backward(losses, params, aggregator, features=zs)`` (and ``per_task_grads(losses, zs)``)
    read the K per-task gradients w.r.t. ``z`` off ONE backward of ``Σ_k L_k``, each head
    back-propagated once; a plain ``losses.sum().backward()`` still gives ``z`` the summed gradient."""
    if not isinstance(z, torch.Tensor) or not z.requires_grad:
        raise ValueError("task_features: z must be a tensor that requires grad (the shared trunk's output)")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"task_features: k must be the number of tasks, an int >= 1, got {k!r}")
    views = TaskFeatures(z.view_as(z) for _ in range(k))
    views.shared = z
    return views


def _view_rows(losses: torch.Tensor, views: TaskFeatures, retain_graph: bool) -> torch.Tensor:
    """Row k = the gradient of ``Σ_j L_j`` at view k, which is ∂L_k/∂z when only L_k reads it."""
    if len(views) != losses.shape[0]:
        raise ValueError(f"features: task_features(z, {len(views)}) for {losses.shape[0]} losses; pass k = K")
    _check_views(losses, views)
    flat, _ = _flat_grad(losses.sum(), list(views), None, retain_graph)
    return flat.view(len(views), -1)


def _check_views(losses: torch.Tensor, views: TaskFeatures) -> None:
    """One clear error unless loss k reads z through view k only, the one thing that tells the
    rows apart. Checked per objective when ``losses`` is a ``torch.stack`` of K scalars, else
    for the losses together (then a loss reading another task's view is not caught)."""
    index = {v.grad_fn: k for k, v in enumerate(views)}
    below = views[0].grad_fn.next_functions[0][0]  # z's own node: reaching it bypasses the views
    root = losses.grad_fn
    parts = [n for n, _ in root.next_functions] if root is not None and root.name() == "StackBackward0" else []
    if len(parts) == len(views):
        for k, part in enumerate(parts):
            read = _views_reached(part, index, below)
            if read != {k}:
                raise ValueError(
                    f"features=task_features(z, K): objective {k} reads views {sorted(read)}; "
                    f"loss k must read view k only (feed zs[k] to task k's head)"
                )
        return
    missed = sorted(set(range(len(views))) - _views_reached(root, index, below))
    if missed:
        raise ValueError(
            f"features=task_features(z, K): views {missed} get no gradient; loss k must read view k "
            "(feed zs[k] to task k's head)"
        )


def _views_reached(node, index: dict, below) -> set[int]:
    """The views a walk down the autograd graph from ``node`` reaches; raises if it reaches z directly."""
    reached, seen, stack = set(), set(), [node]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node in index:
            reached.add(index[node])
        elif node is below:
            raise ValueError(
                "features=task_features(z, K): a loss reads z itself, not through a view; "
                "feed zs[k] to task k's head and z to nothing else"
            )
        else:
            stack.extend(n for n, _ in node.next_functions)
    return reached


def _loop_grads(losses: torch.Tensor, params: list[torch.Tensor], retain_graph: bool) -> torch.Tensor:
    k = losses.shape[0]
    rows = [
        torch.autograd.grad(losses[i], params, retain_graph=retain_graph or i < k - 1, allow_unused=True)
        for i in range(k)
    ]
    # a path through the loss vector reaches a parameter for every objective or for none
    _warn_unreached(range(k) if all(g is None for row in rows for g in row) else ())
    return torch.cat([_stack_rows(row, params, 1) for row in rows], dim=0)


def backward(
    losses: torch.Tensor,
    params,
    aggregator: Callable,
    *,
    retain_graph: bool = False,
    features: torch.Tensor | TaskFeatures | None = None,
    gramian=False,
    task_params=None,
) -> torch.Tensor:
    """Aggregate per-objective gradients of ``losses`` [K] and write the result into ``.grad``.

    ``aggregator`` is a morl :class:`~morl.aggregators.Aggregator` (it gets the detached
    losses too, which EPO-AL and loss-normalised methods need) or any callable
    ``[K, D] -> [D]``. Gradients accumulate into ``.grad`` like ``loss.backward()``; a
    ``torch.optim`` optimizer can step afterwards. Returns the flat ``[D]`` direction; a
    ``.grad`` this call creates is a view of it (clone the direction to keep it past an
    in-place change of ``.grad``). One path per case:

    * ``needs_grads`` False (the loss weightings): ONE backward of
      ``aggregator.weighted_loss(losses)``, whatever the options below;
    * ``features=zs`` (``zs = task_features(z, K)``, head k fed ``zs[k]``) or ``features=z``
      (any tensor the losses reach the ``params`` through, e.g. the shared trunk's output
      ``[B, d]``): MGDA-UB's representation gradients (arXiv 1810.04650, Sec. 3.3): the
      ``[K, z.numel()]`` gradients w.r.t. ``z``, aggregated into one gradient of ``z``,
      back-propagated once into ``params``. With ``zs`` the rows come from ONE backward of
      ``Σ_k L_k`` (each head once); with ``z`` from one batched backward of K one-hot rows
      through every head (K² head backwards: the general form);
    * ``gramian=True`` (Gramian methods only, :class:`~morl.aggregators.GramianAggregator`):
      the exact direction without the ``[K, D]`` matrix: G = J Jᵀ streamed
      (:func:`morl.gramian_tape.streamed_gramian`), the weights w from G, then ONE backward of
      ``wᵀ losses``; ``gramian=tape`` (a :class:`~morl.gramian_tape.GramianTape` that recorded
      the forward) also spares the recorded layers' ``[K, p]`` blocks (``GramianTape(model,
      rows=c)``: c objectives per batched backward);
    * otherwise the ``[K, D]`` rows (:func:`per_task_grads`) and the aggregator on them.

    ``task_params`` (e.g. the heads) get the gradient of ``Σ_k L_k``: a parameter only task k's
    loss reaches gets ∂L_k/∂θ, as in LibMTL.

    NaN/inf never reaches ``.grad``, under the aggregator's ``check_finite`` (a plain
    callable counts as ``"raise"``): ``"raise"`` raises ``ValueError`` naming the objective
    whose loss is non-finite or, when the graph is kept (``retain_graph=True``), whose own
    gradient row is; ``"skip"`` writes a zero direction and counts the call once in
    ``aggregator.nonfinite_steps``; ``"off"`` writes a zero direction. No host read but in
    ``"raise"``. A loss weighting's state depends on the losses only: when they are finite
    and only a gradient is not, it advances as usual.
    """
    losses, params = _check_losses(losses), _trainable(params)
    mode = aggregator.check_finite if isinstance(aggregator, Aggregator) else "raise"
    counted = getattr(aggregator, "nonfinite_steps", None)
    tasks = _check_options(aggregator, params, features, gramian, task_params)
    own = _flat_grad(losses.sum(), tasks, None, True)[0] if tasks else None
    if isinstance(aggregator, Aggregator) and not aggregator.needs_grads:
        direction, grads = _weighted_direction(losses, params, aggregator, retain_graph)
    elif features is not None:
        direction, grads = _representation_direction(losses, params, aggregator, retain_graph, features)
    elif gramian is not False:
        tape = gramian if isinstance(gramian, GramianTape) else None
        direction, grads = _gramian_direction(losses, params, aggregator, retain_graph, tape)
    else:
        direction, grads = _aggregated_direction(losses, params, aggregator, retain_graph)
        direction = direction.clone()  # written into .grad as views: not the aggregator's tensor
    ok = _all_finite(direction)  # isfinite would allocate [D] floats and bools
    if mode == "raise":
        _raise_unless(ok, grads, losses, params, aggregator, retain_graph)
    own_ok = _all_finite(own) if own is not None else ok
    if mode == "raise" and not bool(own_ok):
        raise ValueError(_culprit(losses, tasks, retain_graph))
    if mode != "raise":  # device-side fills on [D]: no host read
        ok = ok & own_ok
        for t in (direction, own):
            if t is not None:
                t.masked_fill_(~ok, 0.0)
        if mode == "skip":
            _count_once(aggregator, counted, ok)
    _write_views(params, direction)
    if own is not None:
        _write_views(tasks, own)
    return direction


def _check_options(aggregator, params, features, gramian, task_params) -> list[torch.Tensor]:
    """One clear error per misuse; returns the task-specific parameters (empty if none)."""
    z = features.shared if isinstance(features, TaskFeatures) else features
    if features is not None and (not isinstance(z, torch.Tensor) or not z.requires_grad):
        raise ValueError(
            "features must be a tensor that requires grad (the shared trunk's output the losses use) "
            "or morl.task_features(z, K)"
        )
    if gramian is not False and gramian is not True and not isinstance(gramian, GramianTape):
        raise ValueError(f"gramian must be False, True or a GramianTape, got {gramian!r}")
    if gramian is not False and features is not None:
        raise ValueError("gramian and features are two ways to one direction: pass one of them")
    weighting = isinstance(aggregator, Aggregator) and not aggregator.needs_grads
    if gramian is not False and not weighting and not isinstance(aggregator, GramianAggregator):
        raise ValueError(
            f"gramian=... needs a Gramian method (one whose weights depend on J Jᵀ only, e.g. mgda, upgrad, "
            f"cagrad, pcgrad); {aggregator!r} needs the [K, D] rows: leave gramian=False"
        )
    tasks = _trainable(task_params) if task_params is not None else []
    shared = {id(p) for p in params}
    if any(id(p) in shared for p in tasks):
        raise ValueError("task_params and params overlap: each parameter is either shared or task-specific")
    return tasks


def _raise_unless(ok, grads, losses, params, aggregator, graph_kept: bool) -> None:
    """The "raise" rule on a direction: blame the aggregator when its input was finite, else name
    the objective."""
    if bool(ok):
        return
    if grads is not None and bool(torch.isfinite(grads).all() & torch.isfinite(losses).all()):
        raise ValueError(
            f"the aggregator {aggregator!r} returned a non-finite direction from finite gradients and losses"
        )
    raise ValueError(_culprit(losses, params, graph_kept))


def _flat_grad(output, params, grad_output, retain_graph: bool) -> tuple[torch.Tensor, bool]:
    """One backward of ``output``; each tensor's gradient is copied into its slice of ONE flat
    buffer as autograd produces it (never held twice). The buffer starts uninitialised (its pages
    become resident as gradients land, not up front); slices no gradient reaches are zeroed.
    Returns (flat, reached)."""
    dtype = functools.reduce(torch.promote_types, (p.dtype for p in params))
    flat = torch.empty(sum(p.numel() for p in params), dtype=dtype, device=params[0].device)
    views, reached = unflatten(flat, params), set()

    def keep(i, view):
        def hook(g):
            reached.add(i)
            view.copy_(g)
            return view if view.dtype == g.dtype else None  # autograd hands back the view, not g

        return hook

    handles = [p.register_hook(keep(i, v)) for i, (p, v) in enumerate(zip(params, views))]
    try:
        torch.autograd.grad(output, params, grad_output, retain_graph=retain_graph, allow_unused=True)
    finally:
        for h in handles:
            h.remove()
    for i in set(range(len(views))) - reached:
        views[i].zero_()
    return flat, bool(reached)


def _write_views(params, flat: torch.Tensor) -> None:
    """``.grad += `` the direction; a ``.grad`` not there yet becomes a view of ``flat`` (no copy)."""
    for p, g in zip(params, unflatten(flat, params)):
        g = g if g.dtype == p.dtype and g.device == p.device else g.to(dtype=p.dtype, device=p.device)
        if p.grad is None:
            p.grad = g
        else:
            p.grad.add_(g)


def _weighted_direction(losses, params, aggregator, retain_graph: bool) -> tuple[torch.Tensor, None]:
    """``needs_grads`` False: ONE backward of ``Σ_k w_k L_k`` gives ``weights @ J`` (no rows)."""
    try:
        loss = aggregator.weighted_loss(losses)
    except ValueError as error:  # its "raise" policy on the losses: name the culprit the same way
        if aggregator.check_finite != "raise" or bool(torch.isfinite(losses).all()):
            raise
        raise ValueError(_culprit(losses, params, retain_graph)) from error
    flat, reached = _flat_grad(loss, params, None, retain_graph)
    _warn_unreached(() if reached else range(losses.shape[0]))
    return flat, None


def _aggregated_direction(losses, params, aggregator, retain_graph: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``[K, D]`` rows, then the aggregator (or a plain callable ``[K, D] -> [D]``) on them."""
    grads = per_task_grads(losses, params, retain_graph=retain_graph)
    return _aggregate(grads, losses, aggregator, params, retain_graph), grads


def _aggregate(grads, losses, aggregator, params, graph_kept: bool) -> torch.Tensor:
    try:
        direction = aggregator(grads, losses.detach()) if isinstance(aggregator, Aggregator) else aggregator(grads)
    except ValueError as error:  # its "raise" policy would name row 0 of a matrix smeared with NaN
        finite = torch.isfinite(grads).all() & torch.isfinite(losses).all()
        if getattr(aggregator, "check_finite", "raise") != "raise" or bool(finite):
            raise
        raise ValueError(_culprit(losses, params, graph_kept)) from error
    if not isinstance(direction, torch.Tensor) or direction.shape != (grads.shape[1],):
        raise ValueError(
            f"aggregator must return a [D]={grads.shape[1]} tensor, got {getattr(direction, 'shape', direction)}"
        )
    return direction


def _representation_direction(losses, params, aggregator, retain_graph: bool, features) -> tuple[torch.Tensor, None]:
    """MGDA-UB: aggregate the ``[K, N]`` gradients w.r.t. z, back-propagate the result once."""
    views = isinstance(features, TaskFeatures)
    at, z = (list(features), features.shared) if views else ([features], features)
    rows = per_task_grads(losses, features if views else at, retain_graph=True)  # the heads only
    dz = _aggregate(rows, losses, aggregator, at, True)
    ok = torch.isfinite(dz).all()
    if getattr(aggregator, "check_finite", "raise") == "raise":
        _raise_unless(ok, rows, losses, at, aggregator, True)
    del rows  # not held through the trunk's backward
    dz = torch.where(ok, dz, torch.zeros((), dtype=dz.dtype, device=dz.device))  # no NaN into the trunk
    flat, reached = _flat_grad(z, params, dz.view_as(z).to(z.dtype), retain_graph)
    if not reached:
        warnings.warn("features do not depend on params: the shared parameters get a zero gradient", stacklevel=3)
    return flat, None


def _gramian_direction(losses, params, aggregator, retain_graph: bool, tape) -> tuple[torch.Tensor, None]:
    """G streamed, w from G, ONE backward of wᵀ·losses (= wᵀJ): no ``[K, D]`` matrix."""
    gram = streamed_gramian(losses, params, tape)  # keeps the graph for the backward below
    try:
        weights = aggregator.gramian_weights(gram, losses.detach())
    except ValueError as error:  # a NaN loss smears every G_kk: name the culprit as the rows path does
        finite = torch.isfinite(torch.diagonal(gram)).all() & torch.isfinite(losses).all()
        if aggregator.check_finite != "raise" or bool(finite):
            raise
        raise ValueError(_culprit(losses, params, True)) from error
    flat, reached = _flat_grad(losses, params, weights.detach().to(losses.dtype), retain_graph)
    _warn_unreached(() if reached else range(losses.shape[0]))
    return flat, None


def _count_once(aggregator: Aggregator, before: torch.Tensor | None, ok: torch.Tensor) -> None:
    """Count a non-finite direction in ``nonfinite_steps`` unless the aggregator's own policy
    counted this call already (a non-finite loss), on device flags: no host read."""
    after = aggregator.nonfinite_steps
    zero = torch.zeros((), dtype=torch.int64, device=ok.device)
    after, before = (zero if t is None else t for t in (after, before))
    aggregator.nonfinite_steps = after + (~ok & (after == before)).to(torch.int64)


def _culprit(losses: torch.Tensor, params: list[torch.Tensor], graph_kept: bool) -> str:
    """The error-path message naming the first objective whose loss, or own gradient row, is
    non-finite: a backward through the loss vector sends 0 to the other objectives, and 0 · inf
    there spreads NaN over every row, so the rows as computed cannot tell."""
    values = losses.detach()
    bad = (~torch.isfinite(values)).nonzero()
    if bad.numel():
        k = int(bad[0, 0])
        return f"objective {k} has a non-finite loss ({float(values[k])}); all {len(values)} losses must be finite"
    k = _first_bad_own_row(losses, params) if graph_kept else None
    if k is not None:
        return f"objective {k} has a non-finite gradient (NaN/inf) although its loss {float(values[k]):g} is finite"
    return (
        f"one of the {len(values)} objectives has a non-finite gradient (NaN/inf) although every loss is finite; "
        "build the losses with torch.stack and call morl.backward(..., retain_graph=True) to have it named"
    )


def _first_bad_own_row(losses: torch.Tensor, params: list[torch.Tensor]) -> int | None:
    """The first objective whose gradient through its own part of ``torch.stack``/``cat`` alone
    is non-finite (the other parts get no gradient at all, not 0); None if losses is not K parts."""
    parts = [node for node, _ in losses.grad_fn.next_functions] if losses.grad_fn is not None else []
    if len(parts) != losses.shape[0]:
        return None
    for k, own in enumerate(parts):
        if own is None:
            continue
        others = {id(n): n for n in parts if n is not None and n is not own}.values()
        hooks = [n.register_prehook(lambda grads: (None,) * len(grads)) for n in others]
        try:
            rows = torch.autograd.grad(losses[k], params, retain_graph=True, allow_unused=True)
        finally:
            for hook in hooks:
                hook.remove()
        if not all(g is None or bool(torch.isfinite(g).all()) for g in rows):
            return k
    return None


def batched_task_grads(
    loss_fn: Callable[..., torch.Tensor],
    params: Mapping[str, torch.Tensor],
    *inputs: torch.Tensor,
    per_task_params: Mapping[str, torch.Tensor] | None = None,
    chunk_size: int | None = None,
    has_aux: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Per-task losses ``[K]`` and gradients ``[K, D]`` in one vmapped pass.

    ``loss_fn(params_dict, *task_inputs) -> scalar`` is the loss of ONE task slice, usually
    written with ``torch.func.functional_call(module, params_dict, x)``. Every tensor in
    ``inputs`` has a leading task dimension K (``[K, B/K, ...]``). ``params`` (name ->
    tensor, e.g. ``dict(module.named_parameters())``) are shared and differentiated; the
    gradient columns follow their order. ``per_task_params`` (name -> ``[K, ...]``) are
    per-task tensors (e.g. stacked per-task critics) merged into ``params_dict`` for the
    matching task and not differentiated. ``chunk_size`` bounds vmap's memory (None = all K).
    With ``has_aux=True``, ``loss_fn`` returns ``(loss, aux)`` (``aux`` any pytree of tensors,
    not differentiated) and the result is ``(losses, grads, aux)`` with ``aux`` stacked over
    tasks, e.g. the log-probabilities an actor loss computed anyway.
    """
    from torch.func import grad_and_value, vmap

    if not isinstance(params, Mapping) or not params:
        raise ValueError("params must be a non-empty dict name -> tensor, e.g. dict(module.named_parameters())")
    if not inputs:
        raise ValueError("batched_task_grads needs at least one input with a leading task dimension [K, ...]")
    per_task = dict(per_task_params or {})
    k = _task_count(inputs, per_task)
    clash = sorted(set(params) & set(per_task))
    if clash:
        raise ValueError(f"names {clash} appear in both params and per_task_params; each name must be in one")

    def one_task(shared: dict, task_own: dict, *task_inputs):
        out = loss_fn({**shared, **task_own}, *task_inputs)
        if has_aux and not (isinstance(out, tuple) and len(out) == 2):
            raise ValueError(f"with has_aux=True loss_fn must return (loss, aux), got {type(out).__name__}")
        loss = out[0] if has_aux else out
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ValueError(f"loss_fn must return a scalar per task (reduce over the task slice), got {shape}")
        return (loss, out[1]) if has_aux else (loss, ())  # () : an empty pytree vmap accepts

    shared = {n: p.detach() for n, p in params.items()}
    own = {n: t.detach() for n, t in per_task.items()}
    in_dims = (None, 0 if own else None) + (0,) * len(inputs)
    task_fn = grad_and_value(one_task, has_aux=True)
    grads, (losses, aux) = vmap(task_fn, in_dims=in_dims, chunk_size=chunk_size)(shared, own, *inputs)
    flat = torch.cat([grads[n].reshape(k, -1) for n in params], dim=1)
    return (losses, flat, aux) if has_aux else (losses, flat)


def _task_count(inputs: Sequence[torch.Tensor], per_task: Mapping[str, torch.Tensor]) -> int:
    sizes = {}
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor) or x.dim() < 1:
            raise ValueError(f"inputs[{i}] must be a tensor with a leading task dimension [K, ...]")
        sizes[f"inputs[{i}]"] = x.shape[0]
    for name, t in per_task.items():
        if not isinstance(t, torch.Tensor) or t.dim() < 1:
            raise ValueError(f"per_task_params[{name!r}] must be a tensor with a leading task dimension [K, ...]")
        sizes[f"per_task_params[{name!r}]"] = t.shape[0]
    if len(set(sizes.values())) != 1:
        raise ValueError(f"all inputs and per-task params need the same leading task dimension K, got {sizes}")
    return next(iter(sizes.values()))
