"""Mixture-of-prompts runs (`morl prompt`)."""
