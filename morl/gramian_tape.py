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
  of output channels from the convolution's weight gradient; a bias G_kl += (Σ_n Δ_k)·(Σ_n Δ_l).

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
    """What the tape saw of one layer: its inputs, the anchors its outputs hang on, the Δs so far."""

    def __init__(self) -> None:
        self.inputs: list[torch.Tensor] = []
        self.anchors: list[torch.Tensor] = []
        self.deltas: dict[int, torch.Tensor] = {}


class GramianTape:
    """Records the inputs of ``model``'s Linear and Conv layers in a forward pass run inside
    ``with tape:``, for ``morl.backward(..., gramian=tape)``. Each recorded output is returned as
    ``output + 0`` (a zero scalar that needs grad): that anchor is what the Gramian's backward
    aims at, so autograd computes the gradients of the layer outputs and never the weights'.
    A layer called several times (weight sharing) is handled; a weight also used outside its
    layer (tied to another module) is not: leave that model off the tape. Records last until
    the next ``with tape:``."""

    def __init__(self, model: nn.Module) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"GramianTape records an nn.Module's layers, got {type(model).__name__}")
        self.model = model
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
    """The Gramian being summed, and the Δs of layers still waiting for another call's."""

    def __init__(self, k: int, dtype: torch.dtype, device: torch.device, covered: dict) -> None:
        self.gram = torch.zeros(k, k, dtype=dtype, device=device)
        self.covered = covered  # recorded layer whose weight is in params -> its bias is too

    def add(self, rows: torch.Tensor) -> None:
        flat = rows.reshape(rows.shape[0], -1).to(self.gram.dtype)
        self.gram += flat @ flat.T

    def layer(self, calls_of: dict, module: nn.Module, index: int, rows: torch.Tensor) -> None:
        calls = calls_of[module]
        calls.deltas[index] = rows
        if len(calls.deltas) == len(calls.inputs):
            self.flush(module, calls)

    def flush(self, module: nn.Module, calls: _Calls) -> None:
        """Fold a layer once the Δ of every call that reached the losses is in."""
        if not calls.deltas:
            return
        order = sorted(calls.deltas)
        a = [calls.inputs[i] for i in order]
        d = [calls.deltas[i].to(self.gram.dtype) for i in order]
        calls.deltas = {}
        k = d[0].shape[0]
        if self.covered[module]:  # Σ over batch and positions of Δ_k: [K, out]
            conv = isinstance(module, _CONVS)
            self.add(
                sum(x.sum(dim=[1, *range(3, x.dim())]) if conv else x.reshape(k, -1, x.shape[-1]).sum(1) for x in d)
            )
        (_conv_weight if isinstance(module, _CONVS) else _linear_weight)(self, module, a, d)


def _linear_weight(stream: _Stream, module: nn.Linear, a: list, d: list) -> None:
    k, out = d[0].shape[0], module.out_features
    a = torch.cat([x.reshape(-1, module.in_features) for x in a]).to(stream.gram.dtype)  # [N, in]
    d = torch.cat([x.reshape(k, -1, out) for x in d], dim=1)  # [K, N, out]
    n, width = a.shape
    if n * n * (k * out + width) <= k * n * width * out:  # ⟨a aᵀ, Δ_k Δ_lᵀ⟩ is the cheaper product
        kernel, flat = a @ a.T, d.reshape(k, -1)
        chunk = max(1, k // 8)  # (a aᵀ) Δ for a few tasks at a time: no second [K, N, out]
        for c in range(0, k, chunk):
            m = kernel @ d[c : c + chunk]
            stream.gram[c : c + chunk] += m.reshape(m.shape[0], -1) @ flat.T
        return
    step = max(1, out // k)  # each slice [K, step, in] is at most one weight's size
    for s in range(0, out, step):
        stream.add(torch.einsum("kno,ni->koi", d[:, :, s : s + step], a))


def _conv_weight(stream: _Stream, module: nn.Module, a: list, d: list) -> None:
    k, out = d[0].shape[0], module.out_channels
    a = torch.cat(a).to(stream.gram.dtype)  # calls stacked along the batch
    d = torch.cat(d, dim=1)  # [K, B, out, *positions]
    step = max(1, out // k) if module.groups == 1 else out  # grouped: whole weight at once
    w = module.weight.detach().to(stream.gram.dtype)
    spatial = [0] * (a.dim() - 2)

    def weight_grad(delta: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        mask = [False, True, False]
        return torch.ops.aten.convolution_backward(
            delta, a, weight, None, module.stride, module.padding, module.dilation, False, spatial, module.groups, mask
        )[1]

    for s in range(0, out, step):
        weight = w[s : s + step]
        stream.add(torch.vmap(weight_grad, in_dims=(0, None))(d[:, :, s : s + step], weight))


def streamed_gramian(
    losses: torch.Tensor, params: Sequence[torch.Tensor], tape: GramianTape | None = None
) -> torch.Tensor:
    """G = J Jᵀ ``[K, K]`` (params' common dtype) of the Jacobian of ``losses`` w.r.t. ``params``,
    in one batched backward that keeps the graph. Layers ``tape`` recorded contribute from their
    inputs and output gradients; every other parameter through its own ``[K, p]`` block."""
    k = losses.shape[0]
    dtype = functools.reduce(torch.promote_types, (p.dtype for p in params))
    ids = {id(p) for p in params}
    recorded = tape.calls if tape is not None else {}
    covered = {m: m.bias is not None and id(m.bias) in ids for m in recorded if id(m.weight) in ids}
    taken = {id(t) for m, with_bias in covered.items() for t in ([m.weight, m.bias] if with_bias else [m.weight])}
    rest = [p for p in params if id(p) not in taken]
    anchors = [a for m in covered for a in tape.calls[m].anchors]
    stream = _Stream(k, dtype, losses.device, covered)

    def fold_param(g: torch.Tensor) -> torch.Tensor:
        _Fold.apply(g, stream.add)
        return torch.zeros((), dtype=g.dtype, device=g.device).expand(g.shape)  # the block is not kept

    handles = [p.register_hook(fold_param) for p in rest]
    if tape is not None:
        tape._fold = lambda m, i, rows: stream.layer(tape.calls, m, i, rows) if m in covered else None

    def one_row(e: torch.Tensor) -> torch.Tensor:
        torch.autograd.grad(losses, anchors + rest, e, retain_graph=True, allow_unused=True)
        return e.sum()

    try:
        torch.vmap(one_row)(torch.eye(k, dtype=losses.dtype, device=losses.device))
    finally:
        for h in handles:
            h.remove()
        if tape is not None:
            tape._fold = None
    for m in covered:  # calls whose output no loss used sent no Δ
        stream.flush(m, tape.calls[m])
    return stream.gram
