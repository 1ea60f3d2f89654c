"""Per-task reward scaling by a running estimate of the reward's spread, as mtrl's MT10 runs did.

mtrl (Sodhani et al., arXiv:2102.06177) builds every Meta-World env through mtenv's
``NormalizedEnvWrapper(normalize_reward=True)`` (garage's ``NormalizedEnv``): one wrapper per
task, whose reward becomes ``r / (sqrt(var) + 1e-8)`` after an exponential update with rate
α = 0.001 from ``mean = 0, var = 1``:

    mean <- (1 - α) mean + α r
    var  <- (1 - α) var + α (r - mean)²      (with the already updated mean)

The mean is tracked but never subtracted: the reward is only rescaled. That is ``exponential``
here. ``running`` divides by the exact standard deviation of every reward of the task seen so
far (Welford's update; population variance), and passes rewards through unscaled until a task
has two of them. Statistics are per task, updated in sub-env order within a step, float64, and
part of the env's ``state_dict`` so that a resumed run continues bitwise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from morl.envs.choices import NORMALIZATION_CHOICES

_EPS = 1e-8  # garage's / mtrl's guard against a zero spread


class RewardNormalizer:
    """Scales rewards per task; ``method`` is ``"exponential"`` (mtrl) or ``"running"`` (Welford)."""

    def __init__(self, num_tasks: int, method: str, alpha: float = 0.001) -> None:
        if method not in NORMALIZATION_CHOICES[1:]:
            raise ValueError(
                f"reward_normalization={method!r} is not valid; allowed: {', '.join(NORMALIZATION_CHOICES)}"
            )
        if not 0 < alpha <= 1:
            raise ValueError(f"reward normalisation rate alpha must lie in (0, 1], got {alpha}")
        self.method, self.alpha = method, float(alpha)
        self.mean = np.zeros(num_tasks, np.float64)
        self.var = np.ones(num_tasks, np.float64)  # exponential: garage's start; running: m2 / count
        self.m2 = np.zeros(num_tasks, np.float64)
        self.count = np.zeros(num_tasks, np.int64)

    def __call__(self, task_ids: np.ndarray, reward: np.ndarray) -> np.ndarray:
        """Update each reward's task statistics, in order, and return the scaled rewards (float64).

        The update functions return the divisor ``sqrt(var) + 1e-8`` of the reward just seen."""
        out = np.empty(len(reward), np.float64)
        update = self._exponential if self.method == "exponential" else self._welford
        for i, (task, r) in enumerate(zip(task_ids, reward)):
            out[i] = float(r) / update(int(task), float(r))
        return out

    def _exponential(self, t: int, r: float) -> float:
        a = self.alpha
        self.mean[t] = (1.0 - a) * self.mean[t] + a * r
        self.var[t] = (1.0 - a) * self.var[t] + a * (r - self.mean[t]) ** 2
        self.count[t] += 1
        return math.sqrt(self.var[t]) + _EPS

    def _welford(self, t: int, r: float) -> float:
        self.count[t] += 1
        delta = r - self.mean[t]
        self.mean[t] += delta / self.count[t]
        self.m2[t] += delta * (r - self.mean[t])
        if self.count[t] < 2:
            return 1.0  # no spread known yet: the reward passes through unscaled
        self.var[t] = self.m2[t] / self.count[t]
        return math.sqrt(self.var[t]) + _EPS

    def state_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "alpha": self.alpha,
            "mean": self.mean.copy(),
            "var": self.var.copy(),
            "m2": self.m2.copy(),
            "count": self.count.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["method"] != self.method or len(state["mean"]) != len(self.mean):
            raise ValueError(
                f"reward normalisation state is for method={state['method']!r} over {len(state['mean'])} "
                f"tasks; this env has method={self.method!r} over {len(self.mean)} tasks"
            )
        self.alpha = float(state["alpha"])
        for key in ("mean", "var", "m2", "count"):
            getattr(self, key)[:] = state[key]
