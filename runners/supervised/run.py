"""``morl supervised CONFIG [key=value ...]`` and ``morl supervised --resume RUN_DIR``.

One loop, top to bottom: per epoch the ordering yields each iteration's per-task units ->
one forward over their union -> per-task losses -> batched per-task gradients ->
aggregator -> optimizer step -> the ordering observes the gradients; then evaluate, log,
checkpoint. At the end the test metrics (last epoch) go to ``final_metrics.json`` with Δm%
against a baseline run when one is configured. Steps that meet a NaN/inf are undone and
counted by the adapter; the counters are read once per epoch: skipped steps are reported, and
``max_nonfinite_updates`` in a row stop the run with one line and exit status 3.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

from morl.runners.errors import UserError

FINAL_METRICS = "final_metrics.json"


def add_arguments(parser) -> None:
    parser.add_argument("config", nargs="?", help="YAML config (e.g. configs/supervised_digits_mgda.yaml)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. epochs=10 aggregator.name=mgda")
    parser.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help="continue RUN_DIR from its last checkpoint (overrides may only change epochs, eval_every, checkpoint_every)")


RESUME_KEYS = ("epochs", "eval_every", "checkpoint_every")


def load(args):
    """Validate everything (config, dataset, aggregator, ordering, baseline) before writing anything."""
    from morl.runners.run_dir import config_or_resume, last_checkpoint
    from morl.runners.supervised.config import SupervisedConfig

    cfg, run_dir = config_or_resume(SupervisedConfig, args, RESUME_KEYS, "supervised")
    checkpoint = None if run_dir is None else last_checkpoint(run_dir)
    for key in ("epochs", "batch_size", "eval_every", "checkpoint_every", "max_nonfinite_updates"):
        if getattr(cfg, key) < 1:
            raise UserError(f"{key} must be >= 1, got {getattr(cfg, key)}")
    if cfg.optim.lr <= 0:
        raise UserError(f"optim.lr must be > 0, got {cfg.optim.lr}")
    baseline = None
    if cfg.baseline_run and cfg.baseline_metrics:
        raise UserError("give either baseline_run or baseline_metrics, not both")
    if cfg.baseline_run:
        path = Path(cfg.baseline_run) / FINAL_METRICS
        if not path.is_file():
            raise UserError(f"baseline_run {cfg.baseline_run!r} has no {FINAL_METRICS} (is it a finished morl supervised run?)")
        baseline = json.loads(path.read_text())["test"]
    elif cfg.baseline_metrics:
        baseline = dict(cfg.baseline_metrics)
    return cfg, run_dir, checkpoint, baseline


def build(cfg, device):
    """Dataset, model, adapter and ordering from the config; library errors become UserError."""
    import torch

    import morl.aggregators as aggregators
    import morl.ordering as ordering
    from morl.agents.supervised.multitask import MultiHeadMLP, MultiTaskLoss, SupervisedMTL
    from morl.envs.data.supervised import load_dataset

    try:
        data = load_dataset(cfg.data.name, **{"seed": cfg.seed, **cfg.data.options})
    except (ValueError, TypeError) as exc:
        raise UserError(f"data: {exc}") from None
    try:
        # "skip": a NaN/inf gradient must not raise mid-run; the adapter undoes and counts the step
        agg = aggregators.build(cfg.aggregator.name, **{"check_finite": "skip", **cfg.aggregator.options})
    except (ValueError, TypeError) as exc:
        raise UserError(f"aggregator: {exc}") from None
    k = len(data.specs)
    try:
        order = ordering.build(cfg.ordering.name, data.train[0].shape[0], k,
                               **{"batch_size": cfg.batch_size, "seed": cfg.seed, **cfg.ordering.options})
    except (ValueError, TypeError) as exc:
        raise UserError(f"ordering: {exc}") from None
    if cfg.task_weights is not None and len(cfg.task_weights) != k:
        raise UserError(f"task_weights has {len(cfg.task_weights)} entries for {k} tasks ({', '.join(data.task_names)})")
    if not cfg.model.hidden or min(cfg.model.hidden) < 1:
        raise UserError(f"model.hidden must list at least one positive shared layer width, got {cfg.model.hidden}")
    if cfg.max_grad_norm is not None and cfg.max_grad_norm <= 0:
        raise UserError(f"max_grad_norm must be > 0 or null, got {cfg.max_grad_norm}")
    torch.manual_seed(cfg.seed)
    model = MultiHeadMLP(data.in_dim, cfg.model.hidden, data.specs).to(device)
    if cfg.optim.name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=cfg.optim.lr, momentum=cfg.optim.momentum, weight_decay=cfg.optim.weight_decay)
    adapter = SupervisedMTL(model, agg, opt, shared="trunk", loss_fn=MultiTaskLoss(data.specs),
                            task_weights=cfg.task_weights, max_grad_norm=cfg.max_grad_norm,
                            keep_task_grads=order.needs_gradients)
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


def main(args) -> int:
    import torch

    from morl.metrics import delta_m
    from morl.runners.checkpoint import atomic_torch_save, atomic_write_text, torch_load
    from morl.runners.config import save_config, to_dict
    from morl.runners.device import resolve_device
    from morl.runners.run_dir import CHECKPOINT_DIR, CONFIG_FILE, LAST_CHECKPOINT, drop_records_after, new_run_dir
    from morl.runners.tensorboard import RunLogger, flatten_config

    cfg, run_dir, checkpoint, baseline = load(args)
    device = resolve_device(cfg.device)
    random.seed(cfg.seed)
    data, adapter, order = build(cfg, device)
    directions = task_metrics(adapter)
    if baseline is not None:
        missing = [k for k in directions if k not in baseline]
        if missing:
            raise UserError(f"the Δm baseline lacks metric(s) {', '.join(missing)}; it must come from a run on the same tasks")
    start_epoch = 0
    if checkpoint is not None:
        state = torch_load(checkpoint, map_location=device)
        adapter.load_state_dict(state["adapter"])
        order.load_state_dict(state["ordering"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        start_epoch = int(state["epoch"])
        save_config(cfg, run_dir / CONFIG_FILE)
        drop_records_after(run_dir / "metrics.jsonl", start_epoch)
    else:
        run_dir = new_run_dir(cfg.out_dir, cfg.name)
        save_config(cfg, run_dir / CONFIG_FILE)
    logger = RunLogger(run_dir, purge_step=start_epoch if checkpoint is not None else None)
    if checkpoint is None:
        logger.hparams(flatten_config(to_dict(cfg)))
    x, y = (t.to(device) for t in data.train)
    val, test = data.batches("val", 512), data.batches("test", 512)
    names = data.task_names
    print(f"morl supervised: {cfg.data.name} ({', '.join(names)}), aggregator={cfg.aggregator.name}, "
          f"ordering={cfg.ordering.name}, epochs={cfg.epochs}, run dir {run_dir}")
    t0 = time.time()
    # (epoch, adapter steps) of the checkpoint on disk, for the divergence message
    saved = (start_epoch, adapter.steps) if checkpoint is not None else None
    watch = NonfiniteWatch(adapter, cfg, run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT)
    try:
        for epoch in range(start_epoch, cfg.epochs):
            train_loss = train_epoch(adapter, order, x, y)
            step = epoch + 1
            watch(step, logger, saved)  # before the checkpoint: a diverged state never replaces a good one
            logger.per_task("train/loss", train_loss, names, step)
            weights = getattr(adapter.aggregator, "weights", None)
            if isinstance(weights, torch.Tensor):
                logger.per_task("train/weights", weights, names, step, mean=False)
            if step % cfg.eval_every == 0 or step == cfg.epochs:
                val_m, test_m = adapter.evaluate(val), adapter.evaluate(test)
                for tag, m in (("val", val_m), ("test", test_m)):
                    for key, value in m.items():
                        logger.scalar(f"{tag}/{key}", value, step)
                logger.record(step, epoch=step, train_loss=train_loss, val=val_m, test=test_m,
                              skipped_nonfinite_updates=watch.reported[0])
                summary = "  ".join(f"{n}={val_m[n + '/' + adapter.metric_names()[i]]:.4f}" for i, n in enumerate(names))
                print(f"epoch {step:4d}/{cfg.epochs}  val {summary}  ({time.time() - t0:.1f}s)", flush=True)
            if step % cfg.checkpoint_every == 0 or step == cfg.epochs:
                state = {"adapter": adapter.state_dict(), "ordering": order.state_dict(), "epoch": step,
                         "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(), "config": to_dict(cfg)}
                atomic_torch_save(state, run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT)
                saved = (step, adapter.steps)
                logger.flush()
        final = {"epoch": cfg.epochs, "val": adapter.evaluate(val), "test": adapter.evaluate(test),
                 "directions": directions, "seconds": time.time() - t0}
        if baseline is not None:
            final["delta_m"] = delta_m(final["test"], baseline, directions)
            logger.scalar("test/delta_m", final["delta_m"], cfg.epochs)
            print(f"Δm% vs baseline: {final['delta_m']:+.3f}")
        atomic_write_text(run_dir / FINAL_METRICS, json.dumps(_finite(final), indent=2))
        print("test " + "  ".join(f"{k}={v:.4f}" for k, v in final["test"].items() if k in directions))
    finally:
        logger.close()
    return 0


class NonfiniteWatch:
    """Reads the adapter's skipped-step counters once per epoch: logs, warns, stops the run."""

    def __init__(self, adapter, cfg, checkpoint: Path) -> None:
        self.adapter, self.cfg, self.checkpoint = adapter, cfg, checkpoint
        self.reported = (int(adapter.nonfinite_steps), adapter.steps)  # (skipped, steps) at the last read

    def __call__(self, epoch: int, logger, saved: tuple[int, int] | None) -> None:
        import torch

        from morl.runners.divergence import warn_skipped

        a = self.adapter
        total, streak, longest = (int(v) for v in torch.stack([a.nonfinite_steps, a.nonfinite_streak, a.nonfinite_longest]).tolist())
        logger.scalar("train/skipped_nonfinite_updates", total, epoch)
        line = warn_skipped(total, self.reported[0], a.steps - self.reported[1])
        self.reported = (total, a.steps)
        if line is not None:
            print(f"epoch {epoch}: {line}", flush=True)
        if longest >= self.cfg.max_nonfinite_updates:
            raise self._diverged(epoch, total, streak, longest, saved)

    def _diverged(self, epoch: int, total: int, streak: int, longest: int, saved: tuple[int, int] | None):
        from morl.runners.divergence import Diverged, advice, streak_text

        limit, steps = self.cfg.max_nonfinite_updates, self.adapter.steps
        # good: the checkpoint holds none of the steps from the last one taken before the streak on
        good = saved is not None and (streak < limit or saved[1] <= max(steps - streak - 1, 0))
        if saved is None:
            where = "no checkpoint was written before it"
        elif good:
            where = f"last good checkpoint {self.checkpoint} (epoch {saved[0]})"
        else:
            where = f"no good checkpoint left ({self.checkpoint}, epoch {saved[0]}, was written after the divergence began)"
        what = streak_text(longest, "max_nonfinite_updates", limit, total, steps)
        tip = advice("optim.lr", "max_grad_norm" if self.cfg.max_grad_norm is None else None)
        exc = Diverged(f"training diverged at epoch {epoch}/{self.cfg.epochs}: {what}; {where}; {tip}")
        exc.report()
        return exc


def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    return obj
