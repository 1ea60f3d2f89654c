"""Command line, training loops, logging, checkpoints and benchmarks."""
