"""Supervised multi-task runs (`morl supervised`)."""
