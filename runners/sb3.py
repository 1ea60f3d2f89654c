"""``morl sb3 [--env point_mass] [--aggregator cagrad] ...``: the stable-baselines3 adapter with SB3's own ``learn()``.

Trains ``MultiTaskSAC`` (morl.agents.rl.sb3) on a multi-task environment and prints the
per-task success of deterministic evaluations; ``--time-updates N`` also compares the CPU time
per update with SB3's plain SAC. The runner hands the learner its environment, so the adapter
itself never imports ``morl.envs``.
"""

from __future__ import annotations

from morl.runners.errors import UserError

POSITIVE = ("timesteps", "eval_every", "eval_episodes", "batch_size")  # options that must be >= 1


def add_arguments(parser) -> None:
    parser.add_argument(
        "--env", default="point_mass", help="point_mass, mt10, mt50 or mt1:<task> (Meta-World, mtrl protocol)"
    )
    parser.add_argument("--aggregator", default="cagrad")
    parser.add_argument("--timesteps", type=int, default=4000, help="transitions (all sub-envs together)")
    parser.add_argument("--eval-every", type=int, default=400)
    parser.add_argument("--eval-episodes", type=int, default=10, help="deterministic episodes per task per evaluation")
    parser.add_argument("--net", default="64,64", help="hidden sizes of actor and critics, e.g. 400,400,400")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--learning-starts", type=int, default=200, help="random transitions before the first update")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--time-updates", type=int, default=0, help="afterwards, CPU ms per update vs SB3's SAC over N updates"
    )


def main(args) -> int:
    net = check_arguments(args)
    env = _make_env(args.env, args.seed)  # before SB3's import: a wrong name fails in a second
    import time

    import torch as th
    from stable_baselines3 import SAC

    from morl.agents.rl.sb3 import MultiTaskSAC, SB3VecEnv, folderless_logger
    from morl.envs import evaluate_policy, make_env

    th.set_num_threads(1)
    small = dict(
        policy_kwargs=dict(net_arch=net),
        batch_size=args.batch_size,
        learning_rate=args.lr,
        learning_starts=args.learning_starts,
        seed=args.seed,
    )
    model = MultiTaskSAC("MlpPolicy", env, aggregator=args.aggregator, **small)
    evaluation = make_env(args.env, seed=args.seed, eval=True)  # the mtrl protocol's fixed goals come from the seed
    start = time.process_time()
    while model.num_timesteps < args.timesteps:
        model.learn(args.eval_every, reset_num_timesteps=False)
        res = evaluate_policy(evaluation, lambda o: model.predict(o, deterministic=True)[0], args.eval_episodes)
        cpu = time.process_time() - start
        line = f"transitions {model.num_timesteps:6d}  cpu {cpu:6.1f}s  success per task {res['success'].round(2)}"
        print(f"{line}  mean {res['success'].mean():.2f}", flush=True)
    if args.time_updates:
        plain = SAC("MlpPolicy", SB3VecEnv(make_env(args.env, seed=args.seed)), **small)
        plain.set_logger(folderless_logger())
        plain.learn(max(400, args.learning_starts + args.batch_size))
        for name, algo in (("MultiTaskSAC/" + args.aggregator, model), ("SB3 SAC", plain)):
            t = time.process_time()
            algo.train(args.time_updates, args.batch_size)
            print(
                f"{name}: {1000 * (time.process_time() - t) / args.time_updates:.2f} CPU ms per update "
                f"({'x'.join(map(str, net))}, batch {args.batch_size}, 1 thread)"
            )
    return 0


def check_arguments(args) -> list[int]:
    """Raise UserError naming the first bad option and what it allows; returns the hidden sizes."""
    import math

    import morl.aggregators as aggregators

    for name in POSITIVE:
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} {getattr(args, name)} must be at least 1")
    for name in ("learning_starts", "time_updates"):
        if getattr(args, name) < 0:
            raise UserError(f"--{name.replace('_', '-')} {getattr(args, name)} must be 0 or more")
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise UserError(f"--lr {args.lr} must be a finite number > 0")
    if args.aggregator not in aggregators.available():
        raise UserError(f"unknown --aggregator {args.aggregator!r}; allowed: {', '.join(aggregators.available())}")
    sizes = args.net.split(",")
    if not all(s.strip().isdecimal() and int(s) >= 1 for s in sizes):
        raise UserError(f"--net {args.net!r} must be comma-separated positive layer sizes, e.g. 64,64")
    return [int(s) for s in sizes]


def _make_env(name: str, seed: int):
    from morl.envs import make_env

    try:
        return make_env(name, seed=seed)
    except ValueError as exc:
        raise UserError(f"--env: {exc}") from None
