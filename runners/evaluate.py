"""``morl eval RUN_DIR``: per-task success of a run's latest (or a chosen) checkpoint."""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", help="a run directory written by `morl train`")
    parser.add_argument("--checkpoint", default=None, help="checkpoint file (default: RUN_DIR/checkpoints/last.pt)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per task (default: run.eval_episodes or the protocol's)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: the run's device)")


def main(args) -> int:
    from morl.runners.rl.runs import evaluate_run

    evaluate_run(args.run_dir, checkpoint=args.checkpoint, episodes=args.episodes, device=args.device)
    return 0
