"""What the RL loop measures between two log points, and how it is written out.

Episode statistics arrive from the environment on the host (numpy); update metrics are
device tensors summed on the device and read back ONCE per log interval. Wall-clock time is
split into environment stepping, updates and (inside the updates) aggregation.
"""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

# update() metric -> TensorBoard tag. Per-task [T] metrics are logged as tag/<task> + tag/mean.
UPDATE_TAGS: dict[str, str] = {
    "actor_loss": "loss/actor",
    "critic_loss": "loss/critic",
    "alpha_loss": "loss/alpha",
    "alpha": "alpha",
    "entropy": "entropy",
    "agg_weights": "aggregator/weight",
    "grad_norm_task": "grad/norm_task",
    "grad_norm_pre": "grad/norm_pre_aggregation",
    "grad_norm_post": "grad/norm_post_aggregation",
    "grad_cos_min": "grad/cos_min",
    "grad_cos_mean": "grad/cos_mean",
    "grad_conflicts": "grad/conflicting_pairs",
    "nonfinite_updates": "train/skipped_nonfinite_updates",
    "nonfinite_streak": "train/nonfinite_streak",
}
SCALAR_METRICS = {
    "grad_norm_pre",
    "grad_norm_post",
    "grad_cos_min",
    "grad_cos_mean",
    "grad_conflicts",
    "nonfinite_updates",
    "nonfinite_streak",
}
# Running counters: the interval reports their latest value, not a mean.
LATEST_METRICS = {"nonfinite_updates", "nonfinite_streak"}


class LoopStats:
    """Accumulators of one log interval plus the latest per-task training episode results."""

    def __init__(self, num_tasks: int = 0) -> None:
        self.num_tasks = num_tasks
        self.last_success = np.full(num_tasks, np.nan)
        self.last_return = np.full(num_tasks, np.nan)
        self.best_eval_success = float("nan")
        self.last_eval: dict[str, Any] | None = None
        self.skipped_reported = 0  # skipped updates already reported on the terminal
        self.updates_reported = 0  # updates made when they were last read
        self.train_seconds = {"cpu": 0.0, "wall": 0.0}  # training steps only, summed over resumes
        self.reset_interval()

    def reset_interval(self) -> None:
        t = self.num_tasks
        self.ep_success = np.zeros(t)
        self.ep_return = np.zeros(t)
        self.ep_count = np.zeros(t, np.int64)
        self.update_sums: dict[str, torch.Tensor] = {}
        self.update_counts: dict[str, int] = {}
        self.update_count = 0
        self.transitions = 0

    def add_episodes(self, task_ids: np.ndarray, info: dict[str, Any], done: np.ndarray) -> None:
        if not done.any():
            return
        tasks = task_ids[done]
        np.add.at(self.ep_success, tasks, np.asarray(info["episode_success"], np.float64)[done])
        np.add.at(self.ep_return, tasks, np.asarray(info["episode_return"], np.float64)[done])
        np.add.at(self.ep_count, tasks, 1)

    def add_update(self, metrics: dict[str, torch.Tensor]) -> None:
        # Device-side sums: no host synchronisation per update.
        # Keys are counted one by one: the conflict statistics of the mean aggregator arrive only
        # on the diagnostic update of each interval.
        for key, value in metrics.items():
            value = value.detach().float()
            prev = self.update_sums.get(key)
            self.update_sums[key] = value if prev is None or key in LATEST_METRICS else prev + value
            self.update_counts[key] = self.update_counts.get(key, 0) + 1
        self.update_count += 1

    def episode_means(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-task success/return of the episodes that ended in this interval; tasks with none
        keep their previous value (NaN before their first episode)."""
        seen = self.ep_count > 0
        self.last_success[seen] = self.ep_success[seen] / self.ep_count[seen]
        self.last_return[seen] = self.ep_return[seen] / self.ep_count[seen]
        return self.last_success.copy(), self.last_return.copy()

    def update_means(self) -> dict[str, np.ndarray]:
        """Interval means of the update metrics, read back in one device->host copy."""
        if not self.update_count:
            return {}
        keys = list(self.update_sums)
        flat = [self.update_sums[k].reshape(-1) / (1 if k in LATEST_METRICS else self.update_counts[k]) for k in keys]
        host = torch.cat(flat).cpu().numpy()
        out, start = {}, 0
        for key, f in zip(keys, flat):
            out[key] = host[start : start + f.numel()]
            start += f.numel()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "num_tasks": self.num_tasks,
            "last_success": self.last_success.copy(),
            "last_return": self.last_return.copy(),
            "best_eval_success": self.best_eval_success,
            "last_eval": self.last_eval,
            "skipped_reported": self.skipped_reported,
            "updates_reported": self.updates_reported,
            "train_seconds": dict(self.train_seconds),
            "ep_success": self.ep_success.copy(),
            "ep_return": self.ep_return.copy(),
            "ep_count": self.ep_count.copy(),
            "update_sums": {k: v.clone() for k, v in self.update_sums.items()},
            "update_counts": dict(self.update_counts),
            "update_count": self.update_count,
            "transitions": self.transitions,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = copy.deepcopy(state)  # the counters go on from here; the caller's state stays as it was
        self.num_tasks = state["num_tasks"]
        # a checkpoint without per-key counts counted every key on every update
        state.setdefault("update_counts", {k: state["update_count"] for k in state["update_sums"]})
        for key, value in state.items():
            if key != "num_tasks":
                setattr(self, key, value)


class SectionTimer:
    """Wall-clock seconds per named section since the last ``reset``."""

    def __init__(self, clock=time.perf_counter) -> None:
        self.clock = clock  # the benchmark passes time.process_time (docs/benchmarks.md)
        self.reset()

    def reset(self) -> None:
        self.seconds: dict[str, float] = {}
        self.start = self.clock()

    @contextmanager
    def __call__(self, name: str):
        t0 = self.clock()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + self.clock() - t0

    def elapsed(self) -> float:
        return self.clock() - self.start


class AggregationTimer:
    """Times the aggregator's calls through forward hooks (the aggregator is an ``nn.Module``;
    nothing of it is replaced) and reads its device-side counters at log time.

    On CPU every call is timed (no synchronisation is needed). On CUDA a call is timed, with a
    synchronisation before and after, only when ``sample_next`` was set -- once per log interval
    -- and the per-call time of that sample is reported.
    """

    def __init__(self, aggregator, device: torch.device, clock=time.perf_counter) -> None:
        self.aggregator, self.clock = aggregator, clock
        self.sync = device.type == "cuda"
        self.device = device
        self.sample_next = False
        self._t0: float | None = None
        self.reset()
        self._handles = (
            aggregator.register_forward_pre_hook(self._start),
            aggregator.register_forward_hook(self._stop),
        )

    def _start(self, module, args) -> None:
        self._t0 = None
        if self.sync and not self.sample_next:
            return
        if self.sync:
            torch.cuda.synchronize(self.device)
        self._t0 = self.clock()

    def _stop(self, module, args, output) -> None:
        if self._t0 is None:
            return
        if self.sync:
            torch.cuda.synchronize(self.device)
            self.sample_next = False
        self.seconds += self.clock() - self._t0
        self.calls += 1

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()

    def reset(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def per_call(self) -> float:
        return self.seconds / self.calls if self.calls else float("nan")

    def counters(self) -> dict[str, int]:
        """The aggregator's counters (``nonfinite_steps``, ``not_converged``) as
        ``aggregator/<name>``: one host read, made at log time only."""
        stats = self.aggregator.stats
        if not stats:
            return {}
        values = torch.stack([v.to(torch.int64) for v in stats.values()]).tolist()
        return {f"aggregator/{name}": int(v) for name, v in zip(stats, values)}


def interval_metrics(
    task_names: list[str], stats: LoopStats, timer: SectionTimer, agg_timer: AggregationTimer
) -> dict[str, Any]:
    """The metrics of one log interval, ``{tag: float | {task: float, "mean": float}}``; the
    shell writes them (TensorBoard + metrics.jsonl)."""
    record: dict[str, Any] = {}
    success, ret = stats.episode_means()
    if not np.isnan(success).all():
        record["train/success"] = per_task(np.nan_to_num(success, nan=0.0), task_names)
        record["train/return"] = per_task(np.nan_to_num(ret, nan=0.0), task_names)
    t0 = time.perf_counter()
    means = stats.update_means()  # the one host synchronisation of the interval
    sync_s = time.perf_counter() - t0
    for key, values in means.items():
        tag = UPDATE_TAGS.get(key, f"train/{key}")
        if key in SCALAR_METRICS or values.size != len(task_names):
            record[tag] = float(values.mean())
        else:
            record[tag] = per_task(values, task_names)
    record.update(_perf(stats, timer, agg_timer, sync_s))
    return record


def per_task(values, task_names: list[str]) -> dict[str, float]:
    """``{task: value, ..., "mean": mean}``: how per-task metrics are logged (``tag/<task>``, ``tag/mean``)."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    return {**{name: float(v) for name, v in zip(task_names, values)}, "mean": float(values.mean())}


def _perf(stats: LoopStats, timer: SectionTimer, agg_timer: AggregationTimer, sync_s: float) -> dict[str, float]:
    elapsed = max(timer.elapsed(), 1e-9)
    env_s = timer.seconds.get("env", 0.0)
    update_s = timer.seconds.get("update", 0.0) + sync_s  # device work finishes during the sync
    agg_s = agg_timer.per_call() * stats.update_count if agg_timer.calls else 0.0
    perf = {
        "perf/transitions_per_s": stats.transitions / elapsed,
        "perf/updates_per_s": stats.update_count / elapsed,
        "perf/env_fraction": env_s / elapsed,
        "perf/update_fraction": update_s / elapsed,
        "perf/aggregation_fraction": min(agg_s / elapsed, 1.0),
        "perf/aggregation_ms": agg_timer.per_call() * 1e3 if agg_timer.calls else float("nan"),
    }
    perf.update({tag: float(value) for tag, value in agg_timer.counters().items()})
    return perf
