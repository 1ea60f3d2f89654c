"""The parts of a ``morl supervised`` run and one epoch over them.

Per epoch the ordering yields each iteration's per-task units -> one forward over their union
-> per-task losses -> batched per-task gradients -> aggregator -> optimizer step -> the
ordering observes the gradients.
"""

from __future__ import annotations

from morl.runners.errors import UserError


def build(cfg, device):
    """Dataset, adapter and ordering from the config; library errors become UserError."""
    import torch

    import morl.aggregators as aggregators
    import morl.ordering as ordering
    from morl.agents.supervised.multitask import MultiHeadMLP, MultiTaskLoss, SupervisedMTL
    from morl.envs.data.supervised import load_dataset

    try:
        data = load_dataset(cfg.data.name, **{"seed": cfg.seed, **cfg.data.options})
    except (ValueError, TypeError) as exc:
        raise UserError(f"data: {exc}") from None
    rows = data.train[0].shape[0]
    if rows < cfg.batch_size:
        raise UserError(
            f"data: the training split holds {rows} rows, fewer than batch_size={cfg.batch_size}; "
            f"lower batch_size (at most {rows}) or give more data"
        )
    try:
        # "skip": a NaN/inf gradient must not raise mid-run; the adapter undoes and counts the step
        agg = aggregators.build(cfg.aggregator.name, **{"check_finite": "skip", **cfg.aggregator.options})
    except (ValueError, TypeError) as exc:
        raise UserError(f"aggregator: {exc}") from None
    k = len(data.specs)
    try:
        order = ordering.build(
            cfg.ordering.name,
            data.train[0].shape[0],
            k,
            **{"batch_size": cfg.batch_size, "seed": cfg.seed, **cfg.ordering.options},
        )
    except (ValueError, TypeError) as exc:
        raise UserError(f"ordering: {exc}") from None
    if cfg.task_weights is not None and len(cfg.task_weights) != k:
        raise UserError(
            f"task_weights has {len(cfg.task_weights)} entries for {k} tasks ({', '.join(data.task_names)})"
        )
    torch.manual_seed(cfg.seed)
    model = MultiHeadMLP(data.in_dim, cfg.model.hidden, data.specs).to(device)
    if cfg.optim.name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    else:
        opt = torch.optim.SGD(
            model.parameters(), lr=cfg.optim.lr, momentum=cfg.optim.momentum, weight_decay=cfg.optim.weight_decay
        )
    adapter = SupervisedMTL(
        model,
        agg,
        opt,
        shared="trunk",
        loss_fn=MultiTaskLoss(data.specs),
        task_weights=cfg.task_weights,
        max_grad_norm=cfg.max_grad_norm,
        keep_task_grads=order.needs_gradients,
        grad_wrt=cfg.grad_wrt,
        heads="heads",  # MultiHeadMLP: grad_wrt=features feeds head k its own view of the trunk output
    )
    return data, adapter, order


def train_epoch(adapter, order, x, y):
    """One pass over the ordering; returns the mean per-task training losses (device tensor)."""
    import torch

    total, steps = None, 0
    b = order.batch_size
    for k, units in enumerate(order.iter_units()):
        # Objectives may sit on different units (JoGBa); one forward over their union serves all.
        uniq, inverse = torch.unique(units, return_inverse=True)
        rows = order.units[uniq].reshape(-1)
        task_index = None if uniq.numel() == 1 else (inverse[:, None] * b + torch.arange(b)).to(x.device)
        rows = rows.to(x.device)
        out = adapter.step((x[rows], y[rows]), task_index)
        if order.needs_gradients:
            order.observe(k, adapter.last_task_grads, adapter.last_direction)
        total = out["losses"] if total is None else total + out["losses"]
        steps += 1
    return total / steps


def task_metrics(adapter) -> dict[str, bool]:
    """The Δm metric set: each task's accuracy/MSE (not the losses), with directions."""
    return {k: v for k, v in adapter.metric_directions().items() if not k.endswith("/loss")}
