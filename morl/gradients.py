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

:func:`backward` chains gradients -> aggregator -> ``.grad`` so that any ``torch.optim``
optimizer can step afterwards ("plug an aggregator into my own loop").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import torch

from morl.aggregators.base import Aggregator

__all__ = [
    "flatten",
    "unflatten",
    "write_grads",
    "per_task_grads",
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


def _stack_rows(rows: Sequence[torch.Tensor | None], params: list[torch.Tensor], k: int) -> torch.Tensor:
    # Parameters no loss reaches get zero columns, so D always equals the total parameter size.
    cols = [
        torch.zeros(k, p.numel(), dtype=p.dtype, device=p.device) if g is None else g.reshape(k, -1)
        for g, p in zip(rows, params)
    ]
    return torch.cat(cols, dim=1)


def per_task_grads(losses: torch.Tensor, params, *, retain_graph: bool = False, batched: bool = True) -> torch.Tensor:
    """The ``[K, D]`` Jacobian of the loss vector w.r.t. the flattened ``params``.

    ``batched=True`` computes all K rows in one vmapped backward
    (``torch.autograd.grad(..., is_grads_batched=True)``); if that raises (an operation in
    the graph without a batching rule) it falls back to K backward passes. Parameters that
    no loss reaches get zero rows. ``retain_graph`` as in ``torch.autograd.grad``.
    """
    losses = _check_losses(losses)
    params = _as_param_list(params)
    bad = [i for i, p in enumerate(params) if not p.requires_grad]
    if bad:
        raise ValueError(f"params {bad} do not require grad; pass only trainable tensors")
    k = losses.shape[0]
    if batched and k > 1:
        eye = torch.eye(k, dtype=losses.dtype, device=losses.device)
        try:
            rows = torch.autograd.grad(
                losses, params, grad_outputs=eye, is_grads_batched=True, retain_graph=retain_graph, allow_unused=True
            )
            return _stack_rows(rows, params, k)
        except RuntimeError as batched_error:
            try:
                return _loop_grads(losses, params, retain_graph)
            except RuntimeError as loop_error:
                raise RuntimeError(
                    "per_task_grads: the batched backward failed and the K-pass fallback could not reuse the "
                    f"graph ({loop_error}); call per_task_grads(..., batched=False) for this model"
                ) from batched_error
    return _loop_grads(losses, params, retain_graph)


def _loop_grads(losses: torch.Tensor, params: list[torch.Tensor], retain_graph: bool) -> torch.Tensor:
    k = losses.shape[0]
    rows = []
    for i in range(k):
        keep = retain_graph or i < k - 1
        grads = torch.autograd.grad(losses[i], params, retain_graph=keep, allow_unused=True)
        rows.append(_stack_rows(grads, params, 1))
    return torch.cat(rows, dim=0)


def backward(losses: torch.Tensor, params, aggregator: Callable, *, retain_graph: bool = False) -> torch.Tensor:
    """Aggregate per-objective gradients of ``losses`` [K] and write the result into ``.grad``.

    ``aggregator`` is a morl :class:`~morl.aggregators.Aggregator` (it gets the detached
    losses too, which EPO-AL and loss-normalised methods need) or any callable
    ``[K, D] -> [D]``. Gradients accumulate into ``.grad`` like ``loss.backward()``; a
    ``torch.optim`` optimizer can step afterwards. Returns the flat ``[D]`` direction.
    A loss weighting (``aggregator.needs_grads`` False: UW, DWA, FAMO, GLS, STCH) skips the
    per-task gradients: one backward of ``aggregator.weighted_loss(losses)``.
    """
    params = _as_param_list(params)
    if isinstance(aggregator, Aggregator) and not aggregator.needs_grads:
        return _weighted_loss_backward(_check_losses(losses), params, aggregator, retain_graph)
    grads = per_task_grads(losses, params, retain_graph=retain_graph)
    if isinstance(aggregator, Aggregator):
        direction = aggregator(grads, losses.detach())
    else:
        direction = aggregator(grads)
    if not isinstance(direction, torch.Tensor) or direction.shape != (grads.shape[1],):
        raise ValueError(f"aggregator must return a [D]={grads.shape[1]} tensor, got {getattr(direction, 'shape', direction)}")
    write_grads(params, direction)
    return direction


def _weighted_loss_backward(losses, params, aggregator, retain_graph: bool) -> torch.Tensor:
    """Loss weightings (``needs_grads`` False): ONE backward of ``Σ_k w_k L_k`` instead of the
    [K, D] Jacobian; the same direction as ``weights @ J`` up to rounding."""
    bad = [i for i, p in enumerate(params) if not p.requires_grad]
    if bad:
        raise ValueError(f"params {bad} do not require grad; pass only trainable tensors")
    loss = aggregator.weighted_loss(losses)
    rows = torch.autograd.grad(loss, params, retain_graph=retain_graph, allow_unused=True)
    direction = _stack_rows(rows, params, 1).reshape(-1)
    write_grads(params, direction)
    return direction


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
