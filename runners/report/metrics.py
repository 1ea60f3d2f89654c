"""Which number each kind of run is judged by, and how a metric name is found in a record.

Headline metric per kind (``--metric`` picks another):

- ``rl``: ``eval/success`` -- per-task success of the deterministic evaluation episodes
  (records with ``kind: eval``).
- ``mo``: ``eval/hv`` -- hypervolume of the population's front of discounted returns
  (``--metric eval/eum``: its expected utility; ``eval/undiscounted/hv``: of the undiscounted returns).
- ``supervised``: ``test/accuracy`` -- per-task test accuracy (``test/mse`` when the tasks are
  regressions); the last epoch's value is the one in ``final_metrics.json``.
- ``forum``: ``test/accuracy`` -- FORUM's per-task test accuracy in percent (``final_metrics.json``
  section ``forum``; the baselines trained in the same run are not part of the report).
- ``fl``: ``test_mean`` -- mean test accuracy over clients, each client with its best model.
- ``prompt``: ``test/routed_acc`` -- test accuracy of the prompt the dispatcher routes each
  instance to (only at the end of the run: no learning curve).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

KINDS = ("rl", "mo", "supervised", "forum", "fl", "prompt")
DEFAULT = {
    "rl": "eval/success",
    "mo": "eval/hv",
    "supervised": "test/accuracy",
    "forum": "test/accuracy",
    "fl": "test_mean",
    "prompt": "test/routed_acc",
}
ALL_TASKS = "all"  # the one column of a metric that is a single number per run
_LOWER_IS_BETTER = ("loss", "mse", "error", "regret", "_ms", "seconds")
# Success rates and accuracies: the best possible score is 1 (or 100 when logged in percent).
_BOUNDED = ("success", "acc", "test_mean", "test_worst", "val_mean")


@dataclass(frozen=True)
class Metric:
    name: str
    higher_is_better: bool
    best: float | None  # the best possible score (1 or 100 for success rates and accuracies), else None

    @property
    def label(self) -> str:
        return self.name if self.higher_is_better else f"{self.name} (lower is better)"


def describe(name: str, values: np.ndarray) -> Metric:
    """Direction and best possible score, from the name (and the scale of the values)."""
    lower = any(word in name.lower() for word in _LOWER_IS_BETTER)
    bounded = not lower and any(word in name.lower() for word in _BOUNDED)
    best = (100.0 if np.nanmax(values, initial=0.0) > 1.0 else 1.0) if bounded else None
    return Metric(name, not lower, best)


def default_metric(kind: str, final: dict[str, Any] | None) -> str:
    """The kind's headline; a supervised run on regression tasks is judged by its test MSE."""
    if kind == "supervised" and final and "directions" in final:
        suffixes = {key.rsplit("/", 1)[-1] for key in final["directions"]}
        if "accuracy" not in suffixes and suffixes:
            return "test/" + sorted(suffixes)[0]
    return DEFAULT[kind]


def lookup(record: dict[str, Any], name: str) -> dict[str, float] | None:
    """``{task: value}`` of metric ``name`` in one record, or None when the record lacks it.

    Spellings found in the runners' records, tried in order:
    ``name`` itself (a per-task dict, a list, or one number), ``A/B`` as ``record[A]["<task>/B"]``
    or ``record[A][B]`` (supervised and prompt records), as top-level keys ``A/<task>/B`` (FORUM's
    loss-weight problem), and as ``A_B`` (FORUM's hyper-cleaning records).
    """
    if name in record:
        return _columns(record[name])
    head, _, tail = name.partition("/")
    if tail and isinstance(record.get(head), dict):
        inner = record[head]
        if tail in inner:
            return _columns(inner[tail])
        found = {k[: -len(tail) - 1]: v for k, v in inner.items() if k.endswith("/" + tail)}
        if found:
            return _columns(found)
    if tail:
        found = {
            k[len(head) + 1 : -len(tail) - 1]: v
            for k, v in record.items()
            if k.startswith(head + "/") and k.endswith("/" + tail) and k.count("/") == 2
        }
        if found:
            return _columns(found)
        if name.replace("/", "_") in record:
            return _columns(record[name.replace("/", "_")])
    return None


def _columns(value: Any) -> dict[str, float] | None:
    """Per-task numbers; ``mean`` entries are dropped (the report does its own averaging)."""
    if isinstance(value, dict):
        out = {str(k): v for k, v in value.items() if k != "mean"}
    elif isinstance(value, list):
        out = {str(i): v for i, v in enumerate(value)}
    elif _is_number(value):
        out = {ALL_TASKS: value}
    else:
        return None
    if not out or not all(v is None or _is_number(v) for v in out.values()):
        return None
    return {k: (float("nan") if v is None else float(v)) for k, v in out.items()}


def names_in(record: dict[str, Any], prefix: str = "") -> list[str]:
    """Metric names a record offers (for the error message naming what is allowed)."""
    out = []
    for key, value in record.items():
        if key in ("step", "time", "kind", "epoch"):
            continue
        if isinstance(value, dict) and value and all(_is_number(v) or v is None for v in value.values()):
            if any("/" in k for k in value) and not prefix:
                out.extend(sorted({f"{key}/{k.rsplit('/', 1)[-1]}" for k in value if "/" in k}))
                out.extend(f"{key}/{k}" for k in value if "/" not in k)
            else:
                out.append(prefix + key)
        elif isinstance(value, dict) and not prefix:
            out.extend(names_in(value, key + "/"))
        elif _is_number(value) or isinstance(value, list):
            out.append(prefix + key)
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
