"""Supervised multi-task learning and FORUM's bi-level applications (hyper-cleaning, loss-weight learning)."""
