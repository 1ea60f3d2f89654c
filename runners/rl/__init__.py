"""Multi-task RL runs (`morl train`)."""
