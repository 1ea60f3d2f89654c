"""``morl eval RUN_DIR``: evaluate the latest (or a chosen) checkpoint of a run of any kind."""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", help="a run directory written by `morl train|supervised|forum|fl|prompt`")
    parser.add_argument("--checkpoint", default=None, help="checkpoint file (default: RUN_DIR/checkpoints/last.pt)")
    parser.add_argument(
        "--episodes",
        type=int,
        default=None,
        help="RL: episodes per task (default: run.eval_episodes or the protocol's); MO: per policy (front.episodes)",
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: the run's device)")
    parser.add_argument(
        "--video",
        action="store_true",
        help="RL: also render evaluation episodes into RUN_DIR/videos/step_<N>/<task>.mp4|gif and TensorBoard",
    )
    parser.add_argument(
        "--video-episodes",
        type=int,
        default=None,
        metavar="N",
        help="RL: episodes per task in each video (default 1; implies --video)",
    )


def main(args) -> int:
    from morl.runners.errors import UserError
    from morl.runners.run_dir import existing_run_dir
    from morl.runners.shell.commands import evaluate
    from morl.runners.shell.kinds import experiment_class, kind_of

    cls = experiment_class(kind_of(existing_run_dir(args.run_dir)))
    options = {}
    if args.episodes is not None:
        if cls.kind not in ("rl", "mo"):
            raise UserError(f"--episodes applies to RL and MO runs only; {args.run_dir} is a {cls.kind} run")
        if args.episodes < 1:
            raise UserError(f"--episodes must be >= 1, got {args.episodes}")
        options["episodes"] = args.episodes
    if args.video or args.video_episodes is not None:
        options.update(_video_options(args, cls.kind))
    overrides = [f"{cls.device_key}={args.device}"] if args.device else []
    evaluate(args.run_dir, checkpoint=args.checkpoint, overrides=overrides, **options)
    return 0


def _video_options(args, kind: str) -> dict:
    from morl.envs.rendering import prefer_headless_gl
    from morl.runners.errors import UserError
    from morl.runners.run_dir import existing_run_dir

    if kind != "rl":
        raise UserError(f"--video applies to RL runs only; {args.run_dir} is a {kind} run")
    episodes = 1 if args.video_episodes is None else args.video_episodes
    if episodes < 1:
        raise UserError(f"--video-episodes must be >= 1, got {episodes}")
    prefer_headless_gl()  # MuJoCo picks its GL backend when the evaluation env first imports it
    return {"video": str(existing_run_dir(args.run_dir)), "video_episodes": episodes}
