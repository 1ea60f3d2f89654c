"""Supervised multi-task learning with any morl aggregator.

:class:`SupervisedMTL` trains a model with shared parameters and task-specific ones (heads):
the K per-task gradients of the *shared* parameters come from one batched backward
(:func:`morl.gradients.per_task_grads`), or, when each task has its own rows (per-task
batches), from one plain backward of the model run on the K row groups under ``torch.func.vmap``,
and are combined by the aggregator; every other
trainable parameter receives the gradient of the weighted loss sum, i.e. each head gets its
own task's gradient. Any ``torch.optim`` optimizer then steps; a step that meets or would
leave a NaN/inf is undone on the device and counted (:attr:`SupervisedMTL.nonfinite_steps`).

Tasks are described by :class:`TaskSpec`; :class:`MultiTaskLoss` turns specs into the loss,
per-sample losses and metrics (accuracy for classification, MSE for regression), and
:class:`MultiHeadMLP` is a ready-made hard-parameter-sharing network.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, vmap

from morl.aggregators import GramianAggregator
from morl.gradients import per_task_grads, task_features, write_grads
from morl.tasks import TaskSpec  # re-exported: the learner takes specs

__all__ = ["TaskSpec", "MultiTaskLoss", "MultiHeadMLP", "SupervisedMTL"]


class MultiTaskLoss:
    """Losses of K heads: cross-entropy (classification) or squared error (regression).

    ``outputs`` is a sequence of K head outputs (``[N, C_k]`` or ``[N]``/``[N, 1]``) and
    ``targets`` a ``[N, K]`` tensor (class labels stored as floats are cast to long).
    """

    def __init__(self, specs: Sequence[TaskSpec]) -> None:
        if not specs:
            raise ValueError("MultiTaskLoss needs at least one TaskSpec")
        self.specs = list(specs)

    @property
    def task_names(self) -> list[str]:
        return [s.name for s in self.specs]

    def per_sample(self, outputs: Sequence[torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
        """Per-sample, per-task losses ``[N, K]``."""
        self._check(outputs, targets)
        cols = []
        for k, (spec, out) in enumerate(zip(self.specs, outputs)):
            y = targets[:, k]
            if spec.kind == "classification":
                cols.append(nn.functional.cross_entropy(out, y.long(), reduction="none"))
            else:
                cols.append((out.reshape(-1) - y.to(out.dtype)) ** 2)
        return torch.stack(cols, dim=1)

    def __call__(self, outputs: Sequence[torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
        return self.per_sample(outputs, targets).mean(dim=0)

    def metrics(self, outputs: Sequence[torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
        """Per-task batch means ``[K]`` of each task's :attr:`TaskSpec.metric`."""
        self._check(outputs, targets)
        vals = []
        for k, (spec, out) in enumerate(zip(self.specs, outputs)):
            y = targets[:, k]
            if spec.kind == "classification":
                vals.append((out.argmax(dim=-1) == y.long()).to(torch.float32).mean())
            else:
                vals.append(((out.reshape(-1) - y.to(out.dtype)) ** 2).to(torch.float32).mean())
        return torch.stack(vals)

    def _check(self, outputs, targets) -> None:
        if len(outputs) != len(self.specs):
            raise ValueError(f"expected {len(self.specs)} head outputs (one per task), got {len(outputs)}")
        if targets.dim() != 2 or targets.shape[1] != len(self.specs):
            raise ValueError(f"targets must have shape [N, {len(self.specs)}], got {tuple(targets.shape)}")


class MultiHeadMLP(nn.Module):
    """Hard parameter sharing: a ReLU MLP trunk (``self.trunk``) and one linear head per task."""

    def __init__(self, in_dim: int, hidden: Sequence[int], specs: Sequence[TaskSpec]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.trunk = nn.Sequential(*layers)
        self.heads = nn.ModuleList(nn.Linear(width, s.out_dim) for s in specs)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        z = self.trunk(x.flatten(1))
        return [head(z) for head in self.heads]


def _resolve_shared(model: nn.Module, shared) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Split the model's trainable parameters into (shared, task-specific)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if isinstance(shared, str):
        shared = [shared]
    if isinstance(shared, nn.Module):
        ids = {id(p) for p in shared.parameters()}
    elif isinstance(shared, (list, tuple)) and shared and all(isinstance(s, str) for s in shared):
        prefixes = tuple(shared)
        ids = {
            id(p)
            for n, p in named
            if n == prefixes or any(n == s or n.startswith(s.rstrip(".") + ".") for s in prefixes)
        }
        if not ids:
            names = sorted({n.split(".")[0] for n, _ in named})
            raise ValueError(
                f"shared prefixes {list(prefixes)} match no trainable parameter; top-level names: {', '.join(names)}"
            )
    else:
        tensors = list(shared) if shared is not None else []
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            raise TypeError("shared must be a Module, a name prefix (str or list of str) or an iterable of parameters")
        ids = {id(t) for t in tensors}
    own = {id(p) for _, p in named}
    if not ids or not ids <= own:
        raise ValueError("shared parameters must be a non-empty subset of the model's trainable parameters")
    return [p for _, p in named if id(p) in ids], [p for _, p in named if id(p) not in ids]


def _shared_module(model: nn.Module, shared) -> nn.Module:
    """The submodule whose output is the shared representation (grad_wrt='features')."""
    if isinstance(shared, nn.Module):
        return shared
    names = dict(model.named_modules())
    name = shared if isinstance(shared, str) else None
    if name is None or name not in names:
        raise ValueError(
            "grad_wrt='features' needs shared to be the trunk submodule or its name (e.g. 'trunk'), "
            f"got {shared if isinstance(shared, str) else type(shared).__name__}; submodules: {', '.join(n for n in names if n and '.' not in n)}"
        )
    return names[name]


def _head_list(model: nn.Module, heads) -> nn.ModuleList:
    """The task heads (a ModuleList or the name of one in ``model``)."""
    found = dict(model.named_modules()).get(heads) if isinstance(heads, str) else heads
    if not isinstance(found, nn.ModuleList) or not len(found):
        got = repr(heads) if isinstance(heads, str) else type(heads).__name__
        raise ValueError(f"heads must be a non-empty nn.ModuleList of the model or its name (e.g. 'heads'), got {got}")
    return found


class SupervisedMTL:
    """Train ``model`` on K tasks with ``aggregator`` combining the shared-parameter gradients.

    Args:
        model: any ``nn.Module``. With ``loss_fn`` given, ``model(x)`` returns the outputs that
            ``loss_fn(outputs, targets) -> [K]`` scores; with ``loss_fn=None``, ``model(x, y)``
            must itself return the ``[K]`` loss vector.
        aggregator: a :class:`morl.aggregators.Aggregator` (or any callable ``[K, D] -> [D]``).
        optimizer: a ``torch.optim`` optimizer over (at least) the model's trainable parameters.
        shared: the shared parameters: a submodule, a parameter-name prefix or list of prefixes
            (e.g. ``"trunk"``), or an iterable of parameters. All other trainable parameters
            are task-specific and get the gradient of ``sum_k w_k L_k``.
        loss_fn: ``callable(outputs, targets) -> [K]``; a :class:`MultiTaskLoss` also provides
            per-sample losses (needed for per-task batches, see :meth:`step`) and metrics.
        task_weights: optional ``[K]`` loss weights ``w`` (default all ones); the aggregator
            sees the gradients of ``w_k L_k``. Change them any time with :attr:`task_weights`
            (FORUM's upper level does).
        task_names: names used in metrics (default: from ``loss_fn.task_names`` or task0..).
        max_grad_norm: optional clipping of the total gradient norm before the step.
        keep_task_grads: compute the ``[K, D]`` shared-parameter gradients even for a loss
            weighting (``aggregator.needs_grads`` False: UW, DWA, FAMO, GLS, STCH), which
            otherwise takes ONE backward of its weighted loss and leaves
            :attr:`last_task_grads` None; orderings that read them (JoGBa) need True.
        grad_wrt: ``"params"`` (default): the aggregator combines the ``[K, D]`` gradients of the
            shared parameters. ``"features"``: MGDA-UB's representation gradients (arXiv
            1810.04650, Sec. 3.3): it combines the ``[K, B·d]`` gradients w.r.t. the shared
            module's output z (``shared`` must then be a submodule or the name of one, e.g.
            ``"trunk"``; z is captured by a forward hook), and that one gradient of z is
            back-propagated once through the trunk. Cheaper for a large trunk; an approximation
            of the exact direction (docs/gradients.md). :attr:`last_task_grads` stays None.
        heads: the K task heads, head k producing task k's output, each called once on a per-row
            input ``[N, ...]`` (the shared module's output): an ``nn.ModuleList`` or its name
            (e.g. ``"heads"``). With per-task batches (``task_index``), head k runs on task k's
            rows only, so head work is linear in K; without ``heads`` every head runs on all
            K·B rows. With ``grad_wrt="features"``, head k is also fed its own view of z
            (:func:`morl.task_features`), or with per-task batches its own gathered rows of z,
            so the K rows come from one backward through each head; without it, one batched
            backward sends K one-hot rows through every head (K² head backwards).
    """

    def __init__(
        self,
        model: nn.Module,
        aggregator: Callable,
        optimizer: torch.optim.Optimizer,
        shared,
        loss_fn: Callable[[Any, torch.Tensor], torch.Tensor] | None = None,
        task_weights: torch.Tensor | Sequence[float] | None = None,
        task_names: Sequence[str] | None = None,
        max_grad_norm: float | None = None,
        keep_task_grads: bool = False,
        grad_wrt: str = "params",
        heads: nn.ModuleList | str | None = None,
    ) -> None:
        self.model = model
        self.aggregator = aggregator
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.shared_params, self.task_params = _resolve_shared(model, shared)
        self.max_grad_norm = max_grad_norm
        self.keep_task_grads = keep_task_grads
        self.grad_wrt = grad_wrt
        self._features: torch.Tensor | None = None
        self._heads = _head_list(model, heads) if heads is not None else None
        self._views, self._fed = None, set()
        self._rows, self._n, self._groups, self._routed = None, 0, None, set()
        # per-task batches: the heads' inputs seen in a vmapped pass (params), the K views of the
        # shared parameters it ran with, the gathered rows of z and their index (features)
        self._capture: dict[int, torch.Tensor] | None = None
        self._expanded: list[torch.Tensor] | None = None
        self._gathered: tuple[torch.Tensor, torch.Tensor] | None = None
        names = {id(p): n for n, p in model.named_parameters()}
        self._shared_names = [names[id(p)] for p in self.shared_params]
        for k, head in enumerate(self._heads or ()):
            head.register_forward_pre_hook(self._feed_head(k))
        if grad_wrt == "features":
            if keep_task_grads:
                raise ValueError(
                    "grad_wrt='features' has no [K, D] shared gradients to keep: keep_task_grads must be False"
                )
            _shared_module(model, shared).register_forward_hook(self._keep_features)
        elif grad_wrt != "params":
            raise ValueError(f"grad_wrt={grad_wrt!r} is not valid; allowed: params, features")
        names = task_names or getattr(loss_fn, "task_names", None)
        self._task_names = list(names) if names else None
        self._task_weights: torch.Tensor | None = None
        if task_weights is not None:
            self.task_weights = task_weights
        self.steps = 0
        # Device counters of skipped steps (in all, in a row, longest run): read by the caller
        # at its own pace, never synchronised per step.
        self.nonfinite_steps, self.nonfinite_streak, self.nonfinite_longest = (
            torch.zeros((), dtype=torch.int64, device=self.device) for _ in range(3)
        )
        self.last_task_grads: torch.Tensor | None = None
        self.last_direction: torch.Tensor | None = None

    # -- tasks and weights ------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.shared_params[0].device

    @property
    def task_names(self) -> list[str]:
        if self._task_names is None:
            raise ValueError("task names are unknown until the first step; pass task_names=")
        return self._task_names

    @property
    def task_weights(self) -> torch.Tensor | None:
        """The ``[K]`` loss weights (None = all ones)."""
        return self._task_weights

    @task_weights.setter
    def task_weights(self, weights) -> None:
        if weights is None:
            self._task_weights = None
            return
        w = torch.as_tensor(weights, dtype=self.shared_params[0].dtype, device=self.device).detach().reshape(-1)
        if self._task_names is not None and w.shape[0] != len(self._task_names):
            raise ValueError(f"task_weights must have {len(self._task_names)} entries (one per task), got {w.shape[0]}")
        if not bool(torch.isfinite(w).all()):
            raise ValueError("task_weights must be finite")
        self._task_weights = w.clone()

    # -- losses -----------------------------------------------------------------------------
    def _to_device(self, batch):
        x, y = batch
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def task_losses(self, batch, task_index: torch.Tensor | None = None) -> torch.Tensor:
        """The ``[K]`` unweighted task losses of ``batch = (x, y)``, with the autograd graph.

        ``task_index`` (``[K, B]`` row indices into the batch, rows may repeat across tasks)
        evaluates task k only on rows ``task_index[k]``: the per-objective orders of JoGBa give
        each task its own minibatch. With ``grad_wrt="params"`` the model runs on the K row groups
        ``x[task_index[k]]`` under ``torch.func.vmap`` (a task's rows are its own copy), so that
        one backward gives the K per-task gradients; the model must then treat rows independently
        (no BatchNorm batch statistics). With ``grad_wrt="features"`` one trunk pass over the
        batch serves all K. With ``heads`` given, head k runs on its task's B rows only.
        """
        self._expanded = None
        x, y = self._to_device(batch)
        if self.loss_fn is None:
            if task_index is not None:
                raise ValueError("task_index needs a loss_fn with per-sample losses (e.g. MultiTaskLoss)")
            losses = self.model(x, y)
        elif task_index is None:
            losses = self.loss_fn(self.model(x), y)
        else:
            if not hasattr(self.loss_fn, "per_sample"):
                raise ValueError("task_index needs a loss_fn with a per_sample(outputs, targets) -> [N, K] method")
            idx = task_index.to(y.device)
            if self.grad_wrt == "params":
                losses = self._grouped_losses(x, y, idx)
            elif self._heads is None:  # every head on all rows, then each task's rows picked
                losses = self.loss_fn.per_sample(self.model(x), y).gather(0, idx.T).mean(dim=0)
            else:  # output k is head k on rows idx[k]: [B, ...], scored against y[idx[k], k]
                losses = self.loss_fn.per_sample(self._routed_forward(x, idx), y.gather(0, idx.T)).mean(dim=0)
        if not isinstance(losses, torch.Tensor) or losses.dim() != 1:
            raise ValueError(
                f"the loss function must return a [K] tensor of task losses, got {getattr(losses, 'shape', losses)}"
            )
        if self._task_names is None:
            self._task_names = [f"task{k}" for k in range(losses.shape[0])]
        elif losses.shape[0] != len(self._task_names):
            raise ValueError(f"got {losses.shape[0]} task losses for {len(self._task_names)} tasks")
        return losses

    def weighted(self, losses: torch.Tensor) -> torch.Tensor:
        return losses if self._task_weights is None else losses * self._task_weights

    # -- one update -------------------------------------------------------------------------
    def step(self, batch, task_index: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """One optimizer step on ``batch = (x, y)``; see :meth:`task_losses` for ``task_index``.

        Returns detached device tensors (no host synchronisation): ``losses`` ``[K]``
        (unweighted) and, when the aggregator exposes them, its ``weights`` ``[K]``. The
        per-task shared gradients ``[K, D]`` and the direction ``[D]`` stay available as
        :attr:`last_task_grads` / :attr:`last_direction` (orderings such as JoGBa read them).
        """
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        losses = self.task_losses(batch, task_index)
        wl = self.weighted(losses)
        if self.task_params:
            # Heads sit at the top of the graph: this pass is cheap, and it keeps the graph for
            # the batched per-task backward of the shared parameters below.
            head = torch.autograd.grad(wl.sum(), self.task_params, retain_graph=True, allow_unused=True)
            for p, g in zip(self.task_params, head):
                p.grad = None if g is None else g
        if self.grad_wrt == "features" and getattr(self.aggregator, "needs_grads", True):
            grads, direction = self._representation_step(wl)
        elif self.keep_task_grads or getattr(self.aggregator, "needs_grads", True):
            grads = self._task_grads(wl)
            if hasattr(self.aggregator, "needs_losses"):
                direction = self.aggregator(grads, wl.detach())
            else:
                direction = self.aggregator(grads)
        else:  # a loss weighting: one backward of Σ_k w_k (t_k L_k), no [K, D] matrix
            grads = None
            rows = torch.autograd.grad(self.aggregator.weighted_loss(wl), self.shared_params, allow_unused=True)
            direction = torch.cat(
                [(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(rows, self.shared_params)]
            )
        write_grads(self.shared_params, direction, accumulate=False)
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.shared_params + self.task_params, self.max_grad_norm)
        # the raw per-task inputs too: a "skip" aggregator turns a NaN row into a zero direction
        checked = [wl.detach(), direction, *(p.grad for p in self.task_params if p.grad is not None)]
        ok = _all_finite(checked if grads is None else [*checked, grads])
        self._count_nonfinite(_step_or_undo(self.optimizer, ok))
        self.steps += 1
        self.last_task_grads = None if grads is None or self.grad_wrt == "features" else grads.detach()
        self.last_direction = direction.detach()
        out = {"losses": losses.detach()}
        weights = getattr(self.aggregator, "weights", None)
        if isinstance(weights, torch.Tensor):
            out["weights"] = weights.detach()
        return out

    def _task_grads(self, wl: torch.Tensor) -> torch.Tensor:
        """The ``[K, D]`` gradients of the weighted losses w.r.t. the shared parameters. Per-task
        batches: one backward into the K views the groups ran with (group k reaches loss k only)."""
        if self._expanded is None:
            return per_task_grads(wl, self.shared_params)
        k = wl.shape[0]
        got = torch.autograd.grad(wl.sum(), self._expanded, allow_unused=True)
        cols = [p.new_zeros(k, p.numel()) if g is None else g.reshape(k, -1) for g, p in zip(got, self.shared_params)]
        return torch.cat(cols, dim=1)

    def _grouped_losses(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """``[K]`` losses, task k's on its own copy ``x[idx[k]]`` of its rows: the model runs under
        ``vmap`` over the K groups, group k with view k of the shared parameters (kept for
        :meth:`_task_grads`). With ``heads`` the vmapped pass records each head's input and runs
        the head on no rows; head k then runs once, on group k's rows of its input."""
        heads = self._heads
        if idx.dim() != 2 or (heads is not None and idx.shape[0] != len(heads)):
            wanted = f"K = {len(heads)} heads" if heads is not None else "K tasks, B rows each"
            raise ValueError(f"task_index must be [K, B] with {wanted}, got {tuple(idx.shape)}")
        k, self._n = idx.shape
        expanded = [p.expand(k, *p.shape) for p in self.shared_params]
        inputs, which = [], []  # the distinct head inputs, and which one head j read

        def group(params, xk, yk):
            self._capture = None if heads is None else {}
            out = functional_call(self.model, dict(zip(self._shared_names, params)), (xk,))
            if heads is None:
                return self.loss_fn.per_sample(out, yk)  # [B, K]: every head on the group
            seen, self._capture = self._capture, None
            missed = sorted(set(range(k)) - set(seen))
            if missed:
                raise ValueError(f"task_index: heads {missed} were not called in the forward pass; each must run once")
            for j in range(k):
                if not any(h is seen[j] for h in inputs):
                    inputs.append(seen[j])
                which.append(next(i for i, h in enumerate(inputs) if h is seen[j]))
            return tuple(inputs)

        try:
            out = vmap(group, randomness="different")(expanded, _groups(x, idx), _groups(y, idx))
        finally:
            self._capture = None
        self._expanded = expanded
        if heads is None:
            return torch.diagonal(out, dim1=0, dim2=2).mean(dim=0)  # task k's column of group k
        parts = [h.unbind(0) for h in out]  # one stack in the backward, not K scatters
        outputs = [head(parts[which[j]][j]) for j, head in enumerate(heads)]
        return self.loss_fn.per_sample(outputs, y.gather(0, idx.T)).mean(dim=0)

    def _keep_features(self, module: nn.Module, inputs, output) -> None:
        recorded = torch.is_grad_enabled() and isinstance(output, torch.Tensor) and output.requires_grad
        self._features = output if recorded else None
        # per-task batches gather each task's rows of z instead (_task_rows)
        viewed = recorded and self._heads is not None and self._rows is None
        self._views = task_features(output, len(self._heads)) if viewed else None
        self._fed, self._gathered = set(), None

    def _routed_forward(self, x: torch.Tensor, idx: torch.Tensor):
        """``model(x)`` with head k fed rows ``idx[k]`` of its input (:meth:`_feed_head`)."""
        if idx.dim() != 2 or idx.shape[0] != len(self._heads):
            raise ValueError(f"task_index must be [K, B] with K = {len(self._heads)} heads, got {tuple(idx.shape)}")
        self._rows, self._n, self._routed = idx, x.shape[0], set()
        try:
            outputs = self.model(x)
        finally:
            self._rows, self._groups = None, None
        if len(self._routed) != len(self._heads):
            missed = sorted(set(range(len(self._heads))) - self._routed)
            raise ValueError(f"task_index: heads {missed} were not called in the forward pass; each must run once")
        return outputs

    def _feed_head(self, k: int):
        """Forward pre-hook of head k: its own view of z in place of z (morl.task_features, with
        grad_wrt='features') and, for per-task batches, only task k's rows of its input."""

        def hook(module: nn.Module, args):
            if not args or not isinstance(args[0], torch.Tensor):
                return None
            h = args[0]
            if self._capture is not None:  # the vmapped pass of _grouped_losses: head k runs later
                self._capture[k] = self._check_rows(h, k)
                return (h[:0], *args[1:])
            if self._rows is not None:
                if self._features is not None and h is self._features:
                    self._fed.add(k)
                h = self._task_rows(h, k)
            elif self._views is not None and h is self._views.shared:
                self._fed.add(k)
                h = self._views[k]
            else:
                return None
            self._routed.add(k)
            return (h, *args[1:])

        return hook

    def _task_rows(self, h: torch.Tensor, k: int) -> torch.Tensor:
        """Rows ``task_index[k]`` of ``h``: one gather shared by the heads, split by ``unbind``
        so that the backward collects the K pieces in one stack, not K full-size scatters."""
        if self._groups is None or self._groups[0] is not h:
            gathered = self._check_rows(h, k).index_select(0, self._rows.reshape(-1))
            self._groups = (h, gathered.unflatten(0, self._rows.shape).unbind(0))
            if h is self._features:  # z's rows: the compact rows of _representation_step
                self._gathered = (gathered, self._rows)
        return self._groups[1][k]

    def _check_rows(self, h: torch.Tensor, k: int) -> torch.Tensor:
        if h.dim() == 0 or h.shape[0] != self._n:
            raise ValueError(
                f"task_index: head {k} got an input of shape {tuple(h.shape)}; per-task batches need heads "
                "called on per-row inputs [N, ...] (N = batch rows)"
            )
        return h

    def _representation_step(self, wl: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the K gradients w.r.t. the trunk output z, the shared direction [D]): the aggregate
        of the rows is back-propagated once through the trunk (NaN in it is not)."""
        z, views, gathered = self._features, self._views, self._gathered
        self._features, self._views, self._gathered = None, None, None
        if z is None or not z.requires_grad:
            raise ValueError("grad_wrt='features': the shared module's output was not recorded in this forward pass")
        if self._heads is not None and len(self._fed) != len(self._heads):
            missed = sorted(set(range(len(self._heads))) - self._fed)
            raise ValueError(f"grad_wrt='features': heads {missed} were not called on the shared module's output")
        if gathered is not None:
            rows, dz = self._compact_direction(wl, z, *gathered)
        else:
            rows = per_task_grads(wl, [z] if views is None else views, retain_graph=True)
            dz = self._aggregate(rows, wl)
        dz = torch.where(_all_finite([dz]), dz, torch.zeros((), dtype=dz.dtype, device=dz.device))
        got = torch.autograd.grad(z, self.shared_params, dz.view_as(z), allow_unused=True)
        direction = torch.cat(
            [(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(got, self.shared_params)]
        )
        return rows, direction

    def _aggregate(self, rows: torch.Tensor, wl: torch.Tensor) -> torch.Tensor:
        return self.aggregator(rows, wl.detach()) if hasattr(self.aggregator, "needs_losses") else self.aggregator(rows)

    def _compact_direction(self, wl, z, gathered, idx) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-task batches: (the compact rows [K, B·d], the aggregate in z's [N·d]). Row block k
        of ``gathered`` (z at ``idx[k]``) is read by head k only, so ONE backward of Σ_k w_k L_k
        gives task k's gradient on its own B rows. Its gradient over the N rows of z is those rows
        added at ``idx[k]``: a Gramian method gets G of those, the rest the [K, N·d] rows."""
        k, b = idx.shape
        rows = torch.autograd.grad(wl.sum(), gathered, retain_graph=True)[0].reshape(k, b, -1)
        flat = idx.reshape(-1)
        if isinstance(self.aggregator, GramianAggregator):
            w = self.aggregator.gramian_weights(_overlap_gramian(rows, idx), wl.detach()).to(rows.dtype)
            dz = rows.new_zeros(z.shape[0], rows.shape[2]).index_add_(0, flat, (w[:, None, None] * rows).flatten(0, 1))
        else:
            dense = rows.new_zeros(k, z.shape[0], rows.shape[2])
            task = torch.arange(k, device=flat.device).repeat_interleave(b)
            dz = self._aggregate(dense.index_put_((task, flat), rows.flatten(0, 1), accumulate=True).flatten(1), wl)
        return rows.flatten(1), dz.reshape(-1)

    def _count_nonfinite(self, ok: torch.Tensor) -> None:
        bad = (~ok).to(torch.int64)
        self.nonfinite_steps += bad
        self.nonfinite_streak.add_(bad).mul_(bad)  # +1 on a skipped step, 0 on a taken one
        torch.maximum(self.nonfinite_longest, self.nonfinite_streak, out=self.nonfinite_longest)

    # -- evaluation -------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, batches: Iterable) -> dict[str, float]:
        """Per-task metrics over ``batches`` (a DataLoader or any iterable of ``(x, y)``).

        Returns ``{"<task>/loss": ..., "<task>/<metric>": ...}`` (sample-weighted means);
        the metric is ``loss_fn.metrics`` when the loss function provides it (accuracy or
        MSE for :class:`MultiTaskLoss`). One host synchronisation at the end.
        """
        self.model.eval()
        loss_sum = metric_sum = None
        count = 0
        for batch in batches:
            x, y = self._to_device(batch)
            n = x.shape[0]
            if self.loss_fn is None:
                losses, metric = self.model(x, y), None
            else:
                outputs = self.model(x)
                losses = self.loss_fn(outputs, y)
                metric = self.loss_fn.metrics(outputs, y) if hasattr(self.loss_fn, "metrics") else None
            loss_sum = losses * n if loss_sum is None else loss_sum + losses * n
            if metric is not None:
                metric_sum = metric * n if metric_sum is None else metric_sum + metric * n
            count += n
        if count == 0:
            raise ValueError("evaluate got no batches")
        if self._task_names is None:
            self._task_names = [f"task{k}" for k in range(loss_sum.shape[0])]
        result = {f"{t}/loss": v for t, v in zip(self.task_names, (loss_sum / count).tolist())}
        if metric_sum is not None:
            for name, metric_name, v in zip(self.task_names, self.metric_names(), (metric_sum / count).tolist()):
                result[f"{name}/{metric_name}"] = v
        return result

    def metric_names(self) -> list[str]:
        """The per-task metric names that :meth:`evaluate` reports besides the losses."""
        specs = getattr(self.loss_fn, "specs", None)
        if specs is not None:
            return [s.metric for s in specs]
        return ["metric"] * len(self.task_names)

    def metric_directions(self) -> dict[str, bool]:
        """``{"<task>/<metric>": higher_is_better}`` for every metric (the Δm direction mask)."""
        out = {f"{t}/loss": False for t in self.task_names}
        for t, m in zip(self.task_names, self.metric_names()):
            out[f"{t}/{m}"] = m == "accuracy"
        return out

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        agg_state = self.aggregator.state_dict() if hasattr(self.aggregator, "state_dict") else {}
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "aggregator": agg_state,
            "task_weights": None if self._task_weights is None else self._task_weights.clone(),
            "task_names": self._task_names,
            "steps": self.steps,
            "nonfinite": torch.stack([self.nonfinite_steps, self.nonfinite_streak, self.nonfinite_longest]).cpu(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if hasattr(self.aggregator, "load_state_dict"):
            self.aggregator.load_state_dict(state["aggregator"])
        self._task_names = state["task_names"]
        self.task_weights = state["task_weights"]
        self.steps = int(state["steps"])
        counts = state.get("nonfinite", torch.zeros(3, dtype=torch.int64))  # older checkpoints: none known
        for counter, value in zip((self.nonfinite_steps, self.nonfinite_streak, self.nonfinite_longest), counts):
            counter.copy_(value)


def _groups(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``[K, B, ...]``: rows ``idx[k]`` of ``t`` for each k (a row in several tasks is copied)."""
    return t.index_select(0, idx.reshape(-1)).unflatten(0, idx.shape)


def _overlap_gramian(rows: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """G = D Dᵀ of the ``[K, N·d]`` matrix D whose row k adds ``rows[k, b]`` ``[d]`` at batch row
    ``idx[k, b]``, without forming D: only entries on the same batch row meet, so G_kl is the sum
    of ⟨rows[k, b], rows[l, c]⟩ over idx[k, b] = idx[l, c]: Σ_r c_r² products for c_r entries on
    row r (K·B when no row repeats; one host read sizes the list of pairs)."""
    k, b = idx.shape
    flat = idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    pos = torch.arange(k * b, device=flat.device)
    head = torch.ones_like(flat, dtype=torch.bool)
    head[1:] = flat[order[1:]] != flat[order[:-1]]
    start = torch.cummax(torch.where(head, pos, 0), dim=0).values  # where each sorted entry's row starts
    count = torch.zeros_like(pos).index_add_(0, start, torch.ones_like(pos))[start]  # entries on that row
    pairs = int(count.sum())
    left = torch.repeat_interleave(pos, count, output_size=pairs)
    offset = torch.arange(pairs, device=flat.device) - torch.repeat_interleave(
        torch.cumsum(count, 0) - count, count, output_size=pairs
    )
    one, two = order[left], order[start[left] + offset]  # flat entries k·B + b on the same row
    vecs = rows.reshape(k * b, -1)
    dots = (vecs[one] * vecs[two]).sum(dim=-1)
    return rows.new_zeros(k, k).index_put_((one // b, two // b), dots, accumulate=True)


def _all_finite(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Device flag: every entry of every tensor is finite (one max-abs reduction each, no sync)."""
    tensors = [t for t in tensors if t.numel()]
    return torch.isfinite(torch.stack(torch._foreach_norm(tensors, float("inf"))).amax())


@torch.no_grad()
def _step_or_undo(optimizer: torch.optim.Optimizer, ok: torch.Tensor) -> torch.Tensor:
    """Step, then restore the parameters AND the optimizer state unless ``ok`` and the result are finite.

    Works for any ``torch.optim`` optimizer without a host sync, at the price of one copy of
    the parameters and the state per step (the supervised models are small). State created by
    this very step is restored to zeros, which is how Adam starts and, for the default
    dampening 0, equivalent to SGD's fresh momentum buffer. Returns whether the step was kept.
    """
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    saved = [p.detach().clone() for p in params]
    before = [{k: v.clone() for k, v in optimizer.state[p].items() if torch.is_tensor(v)} for p in params]
    optimizer.step()
    after = [{k: v for k, v in optimizer.state[p].items() if torch.is_tensor(v)} for p in params]
    ok = ok & _all_finite([*params, *(v for st in after for v in st.values() if v.is_floating_point())])
    for p, old in zip(params, saved):
        p.copy_(torch.where(ok, p, old))
    for old_state, new_state in zip(before, after):
        for key, new in new_state.items():
            new.copy_(torch.where(ok, new, old_state.get(key, torch.zeros_like(new))))
    return ok
