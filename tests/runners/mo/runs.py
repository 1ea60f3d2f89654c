"""A tiny ``mo`` config for the runner tests: MO-HalfCheetah, 2 policies, 8x8 networks, 6-step
episodes, so that a run of a few dozen steps logs, evaluates and checkpoints in seconds."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
QUICK = str(ROOT / "configs" / "mo" / "quickstart.yaml")
TINY = [
    "env.max_episode_steps=6",
    "agent.population=2",
    "agent.hidden_sizes=[8,8]",
    "agent.batch_size=16",
    "agent.buffer_capacity=500",
    "run.device=cpu",
    "run.warmup_steps=8",
    "run.updates_per_step=1",
    "run.log_every=5",
    "run.eval_every=10",
    "run.checkpoint_every=8",
]
