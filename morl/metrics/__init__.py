"""Evaluation metrics for multi-task learning."""

from morl.metrics.delta_m import delta_m

__all__ = ["delta_m"]
