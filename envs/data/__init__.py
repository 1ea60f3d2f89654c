"""Data sources of the non-RL runs: supervised multi-task sets, federated clients, text instances."""
