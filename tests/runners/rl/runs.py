"""A tiny multi-task RL config for the runner tests: the point-mass env's 4 tasks, 16x16 networks
and a small replay on the CPU, so that a session builds and steps in milliseconds."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
QUICK = str(ROOT / "configs" / "quickstart_point_mass.yaml")
TINY = [
    "agent.hidden_sizes=[16,16]",
    "agent.batch_size=32",
    "agent.buffer_capacity=400",
    "run.device=cpu",
    "run.warmup_steps=4",
    "run.eval_episodes=1",
    "aggregator.name=mean",
    "aggregator.options={}",
]
