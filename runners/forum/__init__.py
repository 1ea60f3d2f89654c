"""FORUM bi-level runs (`morl forum`)."""
