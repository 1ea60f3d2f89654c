"""Evaluation metrics: Δm for multi-task learning (delta_m), MosT's (most_metrics), Pareto fronts of
multi-objective RL (pareto: hypervolume, EUM, MUL, sparsity)."""

from morl.metrics.delta_m import delta_m

__all__ = ["delta_m"]
