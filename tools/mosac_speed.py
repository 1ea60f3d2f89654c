"""CPU milliseconds per MO-SAC update (docs/mosac.md, "Speed"): the median of timed updates after a
warm-up, for each aggregator and batch size, on random batches of MO-Hopper's sizes (``--dims``:
observation, action, objectives; MO-HalfCheetah's are 17 6 2):

    OMP_NUM_THREADS=1 .venv/bin/python tools/mosac_speed.py [--population 6] [--batch 128 256]
        [--aggregators linear epo_al mgda upgrad pcd] [--dims 11 3 3] [--updates 20] [--warmup 5] [--profile]
        [--conditioned [--groups 4]]

``--conditioned`` times the preference-conditioned agent (one policy; ``--population`` is then
only its front's size) instead of the population.

Times are the process's CPU time (``time.process_time``), which a machine shared with other jobs
inflates less than wall-clock time; with one thread the two agree on an idle machine.
``--profile`` prints torch.profiler's table of the timed updates (by self CPU time) per cell.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time

import torch

from morl.agents.rl.conditioned_mosac import ConditionedMOSAC
from morl.agents.rl.mosac import MOSAC, MOSACConfig


def batch(b: int, dims: list[int], gen: torch.Generator) -> dict[str, torch.Tensor]:
    obs, act, m = dims
    return {
        "obs": torch.randn(b, obs, generator=gen),
        "action": torch.rand(b, act, generator=gen) * 2 - 1,
        "reward": torch.randn(b, m, generator=gen),
        "next_obs": torch.randn(b, obs, generator=gen),
        "terminated": (torch.rand(b, generator=gen) < 0.01).float(),
    }


def time_updates(name: str, args: argparse.Namespace, b: int) -> tuple[float, float, float]:
    """Median and spread (min, max) of ``args.updates`` timed updates, in CPU ms."""
    cfg = MOSACConfig(
        population=args.population,
        hidden_sizes=args.hidden,
        batch_size=b,
        conditioned=args.conditioned,
        groups=args.groups,
    )
    agent = (ConditionedMOSAC if args.conditioned else MOSAC)(*args.dims, cfg, name, {}, "cpu", seed=0)
    gen = torch.Generator().manual_seed(0)
    batches = [batch(b, args.dims, gen) for _ in range(4)]
    for i in range(args.warmup):
        agent.update(batches[i % 4], i)
    times = []
    profiler = torch.profiler.profile if args.profile else contextlib.nullcontext
    with profiler() as prof:
        for i in range(args.updates):
            start = time.process_time()
            agent.update(batches[i % 4], args.warmup + i)
            times.append(1e3 * (time.process_time() - start))
    if args.profile:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    return statistics.median(times), min(times), max(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--population", type=int, default=6)
    parser.add_argument("--batch", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--aggregators", nargs="+", default=["linear", "epo_al", "mgda", "upgrad", "pcd"])
    parser.add_argument("--dims", type=int, nargs=3, default=[11, 3, 3], metavar=("OBS", "ACT", "M"))
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--conditioned", action="store_true", help="one preference-conditioned policy")
    parser.add_argument("--groups", type=int, default=4, help="--conditioned: preferences per update")
    args = parser.parse_args(argv)
    obs, act, m = args.dims
    agent = f"conditioned, G = {args.groups}" if args.conditioned else f"P = {args.population}"
    print(f"threads {torch.get_num_threads()}, {agent}, O = {obs}, A = {act}, M = {m}, hidden {args.hidden}")
    print("| aggregator | " + " | ".join(f"batch {b} (ms)" for b in args.batch) + " |")
    print("|---|" + "---|" * len(args.batch))
    for name in args.aggregators:
        cells = []
        for b in args.batch:
            med, lo, hi = time_updates(name, args, b)
            cells.append(f"{med:.0f} ({lo:.0f}–{hi:.0f})")
        print(f"| `{name}` | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
