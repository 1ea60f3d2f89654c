"""Environment throughput: ``morl bench envs [--env mt10] [--steps N] [--reference]``.

Prints env-steps/s (one env-step = one transition of one sub-env) of ``make_env(name)`` under
uniform random actions, and with ``--reference`` the same for Meta-World's own
``gym.make_vec("Meta-World/<name>", vector_strategy="sync", use_one_hot=True)``, measured
alternately in the same process so that machine load affects both alike.
"""

from __future__ import annotations

import time

import numpy as np


def steps_per_second(env, steps: int, seed: int = 0) -> tuple[float, float]:
    """Env-steps per wall-clock second and per CPU second of this process, over ``steps`` vector
    steps with uniform random actions (drawn beforehand). On a loaded machine the CPU figure is
    the one to compare."""
    env.reset(seed=seed)
    n, a = env.num_envs, env.single_action_space.shape[0]
    actions = np.random.default_rng(seed).uniform(-1, 1, (steps, n, a)).astype(np.float32)
    start, cpu = time.perf_counter(), time.process_time()
    for t in range(steps):
        env.step(actions[t])
    return steps * n / (time.perf_counter() - start), steps * n / (time.process_time() - cpu)


def run(args) -> int:
    from morl.runners.errors import UserError

    if args.steps < 1 or args.repeats < 1:
        raise UserError(f"--steps and --repeats must be >= 1, got {args.steps} and {args.repeats}")
    if args.reference and args.env.lower() not in ("mt10", "mt50"):
        raise UserError(f"--reference times Meta-World's own MT10 or MT50 vector env; --env is {args.env!r}")
    from morl.envs import make_env

    ours = make_env(args.env, seed=0, protocol=args.protocol)
    ref = None
    if args.reference:
        import gymnasium as gym
        import metaworld  # noqa: F401  (registers the Meta-World ids)

        ref = gym.make_vec(f"Meta-World/{args.env.upper()}", vector_strategy="sync", seed=0, use_one_hot=True)
    for r in range(args.repeats):
        wall, cpu = steps_per_second(ours, args.steps)
        line = f"repeat {r}: ours {wall:6.0f} env-steps/s ({cpu:6.0f} per CPU-s)"
        if ref is not None:
            wall, cpu = steps_per_second(ref, args.steps)
            line += f" | gym.make_vec {wall:6.0f} env-steps/s ({cpu:6.0f} per CPU-s)"
        print(line, flush=True)
    return 0
