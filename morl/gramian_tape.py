"""The K×K Gramian G = J Jᵀ of per-objective gradients without holding the ``[K, D]`` matrix J.

:func:`streamed_gramian` runs ONE batched backward of the ``[K]`` losses (``torch.vmap`` over the
rows of the identity, as ``is_grads_batched`` does) and folds each block of J into G as autograd
produces it, G = Σ_b J_b J_bᵀ, freeing the block at once:

* a parameter block J_b ``[K, p_b]`` arrives through a hook on the parameter, is folded and
  replaced by a stride-0 zero, so at most one block is alive (peak ``K × largest parameter``);
* the ``nn.Linear`` and ``nn.Conv1d/2d/3d`` layers a :class:`GramianTape` recorded during the
  forward never form J_b: from the layer input a ``[N, in]`` (N = batch × positions) and the
  per-objective gradients of its output Δ_k ``[N, out]``, a Linear weight gives
  G_kl += ⟨a aᵀ, Δ_k Δ_lᵀ⟩ (TorchJD's "autogram" idea, arXiv 2406.16232), or, when N is large,
  its rows in slices of output units, J_s = Δ_{k,s}ᵀ a; a convolution its weight rows in slices
  of output channels from the convolution's weight gradient; a bias G_kl += (Σ_n Δ_k)·(Σ_n Δ_l);
* before the backward, one walk of the losses' autograd graph checks that every use of a
  recorded weight or bias is a recorded call (anything else would be missing from G);
* ``GramianTape(model, rows=c)`` runs the batched backward c objectives at a time (K/c passes), so
  its frontier holds c rows, not K: a cross-chunk block G_kl needs both rows, so each block keeps
  its smaller form across chunks, its rows ``[K, p]`` or a layer's Δ ``[K, N, out]``, folded at
  the end. Unchunked, folding as autograd goes keeps nothing: that is better when Δ is large.

Autograd hands a hook inside ``vmap`` one row at a time; :class:`_Fold`'s ``vmap`` rule is where
the K rows are seen together.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch import nn

__all__ = ["GramianTape", "streamed_gramian"]

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


class _Fold(torch.autograd.Function):
    """Calls ``fold(x)`` with the physical ``[K, ...]`` tensor of a vmapped gradient; returns a dummy."""

    @staticmethod
    def forward(x: torch.Tensor, fold: Callable[[torch.Tensor], None]) -> torch.Tensor:
        fold(x.unsqueeze(0))  # outside vmap: one objective
        return x.new_zeros(())

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        pass

    @staticmethod
    def vmap(info, in_dims, x: torch.Tensor, fold) -> tuple[torch.Tensor, int]:
        rows = x.expand(info.batch_size, *x.shape) if in_dims[0] is None else x.movedim(in_dims[0], 0)
        fold(rows)
        return x.new_zeros(info.batch_size), 0


class _Calls:
    """What the tape saw of one layer: its inputs, the anchors its outputs hang on, the autograd
    nodes of each call (anchored output, layer output, input), the Δs so far and how many will come."""

    def __init__(self) -> None:
        self.inputs: list[torch.Tensor] = []
        self.anchors: list[torch.Tensor] = []
        self.nodes: list[tuple] = []
        self.deltas: dict[int, torch.Tensor] = {}
        self.expected = 0


class GramianTape:
    """Records the inputs of ``model``'s Linear and Conv layers in a forward pass run inside
    ``with tape:``, for ``morl.backward(..., gramian=tape)``. Each recorded output is returned as
    ``output + 0`` (a zero scalar that needs grad): that anchor is what the Gramian's backward
    aims at, so autograd computes the gradients of the layer outputs and never the weights'.
    A layer called several times (weight sharing) is handled. A recorded layer's weight or bias
    that the losses also reach another way (tied to another module, or a forward outside the
    latest ``with tape:``) is refused by ``morl.backward`` with one error: G would miss that use.
    Records last until the next ``with tape:``. ``rows=c``: the Gramian's batched backward takes
    c objectives at a time (default None: all K in one pass)."""

    def __init__(self, model: nn.Module, rows: int | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"GramianTape records an nn.Module's layers, got {type(model).__name__}")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
            raise ValueError(
                f"GramianTape: rows must be an int >= 1 (objectives per backward pass) or None, got {rows!r}"
            )
        self.model, self.rows = model, rows
        self.calls: dict[nn.Module, _Calls] = {}
        self._handles: list = []
        self._fold: Callable | None = None  # set while streamed_gramian runs

    def __enter__(self) -> GramianTape:
        self.calls = {}
        for m in self.model.modules():
            if _supported(m) and m.weight.requires_grad:
                self._handles.append(m.register_forward_hook(self._record))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _record(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor | None:
        if not torch.is_grad_enabled() or not isinstance(output, torch.Tensor):
            return None
        calls = self.calls.setdefault(module, _Calls())
        index = len(calls.inputs)
        anchor = output.new_zeros((), requires_grad=True)
        calls.inputs.append(inputs[0].detach())
        calls.anchors.append(anchor)
        out = output + anchor
        calls.nodes.append((out.grad_fn, output.grad_fn, inputs[0].grad_fn))
        out.register_hook(lambda delta: self._on_delta(module, index, delta))
        return out

    def _on_delta(self, module: nn.Module, index: int, delta: torch.Tensor) -> None:
        if self._fold is not None:
            _Fold.apply(delta, lambda rows: self._fold(module, index, rows))


def _supported(m: nn.Module) -> bool:
    if isinstance(m, nn.Linear):
        return True
    return isinstance(m, _CONVS) and m.padding_mode == "zeros" and not isinstance(m.padding, str)


class _Stream:
    """The Gramian being summed, and the Δs of layers still waiting for another call's. In chunks
    (``rows < k``) each block's rows and each deferred layer's Δ are kept ``[K, ...]`` until
    :meth:`finish`; ``start`` is the current chunk's first objective."""

    def __init__(self, k: int, rows: int, dtype: torch.dtype, device: torch.device, covered: dict) -> None:
        self.gram = torch.zeros(k, k, dtype=dtype, device=device)
        self.covered = covered  # recorded layer whose weight is in params -> its bias is too
        self.k, self.start = k, 0
        self.kept: dict | None = {} if rows < k else None  # id(parameter) -> its rows [K, p]
        self.deltas: dict = {}  # layer -> {call: its Δ rows [K, ...]}

    def add(self, rows: torch.Tensor, block: torch.Tensor, col: int = 0) -> None:
        """Fold rows ``[c, ...]`` of ``block`` (its columns from ``col`` on), or keep them."""
        flat = rows.reshape(rows.shape[0], -1).to(self.gram.dtype)
        if self.kept is None:
            self.gram += flat @ flat.T
            return
        if id(block) not in self.kept:
            self.kept[id(block)] = flat.new_zeros(self.k, block.numel())
        self.kept[id(block)][self.start : self.start + flat.shape[0], col : col + flat.shape[1]] = flat

    def layer(self, calls_of: dict, module: nn.Module, index: int, rows: torch.Tensor) -> None:
        calls = calls_of[module]
        calls.deltas[index] = rows
        if len(calls.deltas) == calls.expected:
            self.flush(module, calls)

    def flush(self, module: nn.Module, calls: _Calls) -> None:
        """Fold a layer once the Δ of every call that reached the losses is in (in chunks: keep
        its Δ rows instead when they are smaller than its weight's)."""
        if not calls.deltas:
            return
        order = sorted(calls.deltas)
        a = [calls.inputs[i] for i in order]
        d = [calls.deltas[i].to(self.gram.dtype) for i in order]
        calls.deltas = {}
        if self.kept is not None and sum(x[0].numel() for x in d) < module.weight.numel():
            kept = self.deltas.setdefault(module, {})
            for i, x in zip(order, d):
                kept.setdefault(i, x.new_zeros(self.k, *x.shape[1:]))[self.start : self.start + x.shape[0]] = x
            return
        k = d[0].shape[0]
        if self.covered[module]:  # Σ over batch and positions of Δ_k: [K, out]
            conv = isinstance(module, _CONVS)
            self.add(
                sum(x.sum(dim=[1, *range(3, x.dim())]) if conv else x.reshape(k, -1, x.shape[-1]).sum(1) for x in d),
                module.bias,
            )
        (_conv_weight if isinstance(module, _CONVS) else _linear_weight)(self, module, a, d)

    def finish(self, calls_of: dict) -> None:
        """Fold what the chunks kept: each block's rows, then each deferred layer from its K Δs."""
        kept, self.kept = self.kept or {}, None
        while kept:
            rows = kept.popitem()[1]
            self.gram += rows @ rows.T
        while self.deltas:
            module, deltas = self.deltas.popitem()
            calls_of[module].deltas = deltas
            self.flush(module, calls_of[module])


def _linear_weight(stream: _Stream, module: nn.Linear, a: list, d: list) -> None:
    k, out = d[0].shape[0], module.out_features
    a = torch.cat([x.reshape(-1, module.in_features) for x in a]).to(stream.gram.dtype)  # [N, in]
    d = torch.cat([x.reshape(k, -1, out) for x in d], dim=1)  # [K, N, out]
    n, width = a.shape
    if stream.kept is None and _kernel_is_cheaper(n, k, width, out):  # it writes G: all K rows
        kernel, flat = a @ a.T, d.reshape(k, -1)
        chunk = max(1, k // 8)  # (a aᵀ) Δ for a few tasks at a time: no second [K, N, out]
        for c in range(0, k, chunk):
            m = kernel @ d[c : c + chunk]
            stream.gram[c : c + chunk] += m.reshape(m.shape[0], -1) @ flat.T
        return
    step = max(1, out // k)  # each slice [K, step, in] is at most one weight's size
    for s in range(0, out, step):
        stream.add(torch.einsum("kno,ni->koi", d[:, :, s : s + step], a), module.weight, s * width)


def _kernel_is_cheaper(n: int, k: int, width: int, out: int) -> bool:
    """⟨a aᵀ, Δ_k Δ_lᵀ⟩ (N²(K·out + in) multiply-adds) against the K weight gradients (K·N·in·out)."""
    return n * n * (k * out + width) <= k * n * width * out


def _conv_weight(stream: _Stream, module: nn.Module, a: list, d: list) -> None:
    out = module.out_channels
    step = max(1, out // d[0].shape[0]) if module.groups == 1 else out  # grouped: whole weight at once
    w = module.weight.detach().to(stream.gram.dtype)
    a, spatial = [x.to(w.dtype) for x in a], [0] * (a[0].dim() - 2)

    def weight_grad(delta: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        mask = [False, True, False]
        return torch.ops.aten.convolution_backward(
            delta, x, weight, None, module.stride, module.padding, module.dilation, False, spatial, module.groups, mask
        )[1]

    per_task = torch.vmap(weight_grad, in_dims=(0, None, None))
    for s in range(0, out, step):  # the calls one by one: their inputs may differ in size
        weight = w[s : s + step]
        stream.add(
            sum(per_task(x[:, :, s : s + step], y, weight) for x, y in zip(d, a)), module.weight, s * w[0].numel()
        )


def _check_tape(losses: torch.Tensor, tape: GramianTape, covered: dict) -> None:
    """One error if the tape cannot give G: it recorded no layer of ``params``, or the losses reach
    a recorded weight or bias through an autograd node outside the recorded calls (that use
    would be missing from G). Sets how many Δs each layer will receive (its calls the losses reach)."""
    name = {m: f"{n or 'the model'} ({type(m).__name__})" for n, m in tape.model.named_modules()}
    if not covered:
        raise ValueError(
            "gramian=tape: the tape recorded no call of a Linear/Conv layer whose weight is in params; run the "
            "forward that builds the losses inside `with tape:`, or pass gramian=True"
        )
    owner = {}  # the AccumulateGrad node of each recorded weight and bias -> its layer
    with torch.enable_grad():
        for m, with_bias in covered.items():
            for t in (m.weight, m.bias) if with_bias else (m.weight,):
                owner[t.view_as(t).grad_fn.next_functions[0][0]] = m
    inside = {}  # autograd node of a recorded call -> its layer: from the layer output down to its input
    for m in covered:
        for _, out_fn, in_fn in tape.calls[m].nodes:
            _walk(out_fn, lambda node, m=m: node is not in_fn and inside.setdefault(node, m) is m)
    reached = set()

    def visit(node) -> bool:
        for nxt, _ in node.next_functions:
            if nxt in owner and inside.get(node) is not owner[nxt]:
                raise ValueError(
                    f"gramian=tape: the losses use the weight or bias of layer {name.get(owner[nxt], 'a layer')} "
                    "outside the calls recorded in the latest `with tape:` (a forward outside or before it, or "
                    "the tensor shared with another module or op); run the whole forward inside one `with "
                    "tape:`, or pass gramian=True"
                )
        reached.add(node)
        return True

    _walk(losses.grad_fn, visit)
    for m in covered:
        tape.calls[m].expected = sum(anchored in reached for anchored, _, _ in tape.calls[m].nodes)


def _walk(root, enter: Callable) -> None:
    """Depth-first over the autograd graph below ``root``, each node once; ``enter(node)`` False
    stops the walk there."""
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if enter(node):
            stack.extend(n for n, _ in node.next_functions)


def streamed_gramian(
    losses: torch.Tensor, params: Sequence[torch.Tensor], tape: GramianTape | None = None
) -> torch.Tensor:
    """G = J Jᵀ ``[K, K]`` (params' common dtype) of the Jacobian of ``losses`` w.r.t. ``params``,
    in one batched backward (``tape.rows`` objectives at a time) that keeps the graph. Layers
    ``tape`` recorded contribute from their inputs and output gradients; every other parameter
    through its own ``[K, p]`` block."""
    k = losses.shape[0]
    rows = min(k, tape.rows or k) if tape is not None else k
    dtype = functools.reduce(torch.promote_types, (p.dtype for p in params))
    ids = {id(p) for p in params}
    recorded = tape.calls if tape is not None else {}
    covered = {m: m.bias is not None and id(m.bias) in ids for m in recorded if id(m.weight) in ids}
    if tape is not None:
        _check_tape(losses, tape, covered)
    taken = {id(t) for m, with_bias in covered.items() for t in ([m.weight, m.bias] if with_bias else [m.weight])}
    rest = [p for p in params if id(p) not in taken]
    anchors = [a for m in covered for a in tape.calls[m].anchors]
    stream = _Stream(k, rows, dtype, losses.device, covered)

    def fold_param(p: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        _Fold.apply(g, lambda block_rows: stream.add(block_rows, p))
        return torch.zeros((), dtype=g.dtype, device=g.device).expand(g.shape)  # autograd's block is not kept

    handles = [p.register_hook(functools.partial(fold_param, p)) for p in rest]
    if tape is not None:
        tape._fold = lambda m, i, rows: stream.layer(tape.calls, m, i, rows) if m in covered else None

    def one_row(e: torch.Tensor) -> torch.Tensor:
        torch.autograd.grad(losses, anchors + rest, e, retain_graph=True, allow_unused=True)
        return e.sum()

    eye = torch.eye(k, dtype=losses.dtype, device=losses.device)
    try:
        for start in range(0, k, rows):
            stream.start = start
            torch.vmap(one_row)(eye[start : start + rows])
            for m in covered:  # calls whose output no loss used sent no Δ
                stream.flush(m, tape.calls[m])
    finally:
        for h in handles:
            h.remove()
        if tape is not None:
            tape._fold = None
    stream.finish(tape.calls if tape is not None else {})
    return stream.gram
