"""Multi-objective RL runs (``morl train`` on an ``mo`` config): MO-SAC on MO-Gymnasium tasks."""
