"""Multi-task environments: Meta-World wrappers and our own fast vectorised tasks."""
