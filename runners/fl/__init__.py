"""Federated-learning runs (`morl fl`)."""
