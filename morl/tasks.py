"""What one supervised task is: shared by data sources (``envs``) and learners (``agents``),
which may not import each other, so it lives in the core."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class TaskSpec:
    """One task: ``classification`` with ``num_classes`` logits, or scalar ``regression``."""

    name: str
    kind: Literal["classification", "regression"]
    num_classes: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("classification", "regression"):
            raise ValueError(
                f"task {self.name!r}: kind {self.kind!r} is not valid; allowed: classification, regression"
            )
        if self.kind == "classification" and self.num_classes < 2:
            raise ValueError(
                f"task {self.name!r}: a classification task needs num_classes >= 2, got {self.num_classes}"
            )

    @property
    def out_dim(self) -> int:
        return self.num_classes if self.kind == "classification" else 1

    @property
    def metric(self) -> str:
        """The task's evaluation metric: ``accuracy`` (higher is better) or ``mse`` (lower)."""
        return "accuracy" if self.kind == "classification" else "mse"
