"""Learners that produce per-objective losses and consume aggregated directions."""
