"""``morl bench TARGET``: benchmarks whose figures go into docs/benchmarks.md."""

from __future__ import annotations

import importlib

TARGETS: dict[str, str] = {
    "aggregators": "morl.runners.bench.aggregators",
    "rl": "morl.runners.bench.rl",
    "most": "morl.runners.bench.most",
    "envs": "morl.runners.bench.env_speed",
    "scale": "morl.runners.bench.scale",
}


def add_arguments(parser) -> None:
    parser.add_argument("target", choices=sorted(TARGETS), help="what to measure")
    envs = parser.add_argument_group("envs: environment throughput (env-steps/s under random actions)")
    envs.add_argument("--env", default="mt10", help="env name, e.g. mt10, mt1:reach-v3, point_mass (default: mt10)")
    envs.add_argument("--steps", type=int, default=300, help="vector steps per measurement (default: 300)")
    envs.add_argument("--repeats", type=int, default=3, help="measurements (default: 3)")
    envs.add_argument("--protocol", default="mtrl", help="Meta-World protocol: mtrl or metaworld_v3")
    envs.add_argument(
        "--reference", action="store_true", help="also time Meta-World's own gym.make_vec (Meta-World only)"
    )
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (smoke run)")
    parser.add_argument("--out", default=None, help="also write the results as JSON to this path")
    parser.add_argument(
        "--against",
        choices=("torchjd",),
        default=None,
        help="aggregators only: time each method next to TorchJD's on the same matrix (CPU, float32)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: 1 for rl and with --against, else torch's)",
    )
    parser.add_argument(
        "--methods",
        default=None,
        help="with --against: comma-separated morl method names to time (default: every paired method); "
        "scale: the cells' methods, e.g. plain,gramian,gramian:2 (gramian:c: c objectives per batched backward)",
    )
    parser.add_argument(
        "--ks",
        default=None,
        help="with --against: comma-separated K values (default: 2,10,50,100; --quick 2,5); scale: the cells' K "
        "(default: 2,10,40; --quick 3)",
    )
    parser.add_argument(
        "--ds",
        default=None,
        help="with --against: comma-separated D values, e.g. 344008 (MT10's actor) or 1e6 (default: 1e4,1e6; --quick 1e3)",
    )
    parser.add_argument(
        "--growth",
        action="store_true",
        help="scale only: time growth from MT10 to MT50, 100 to 1,000 FL clients, 4 to 40 supervised tasks",
    )
    parser.add_argument(
        "--check-finite",
        choices=("raise", "skip", "off"),
        default=None,
        help="with --against: morl's check_finite option (default raise, the library default)",
    )


def main(args) -> int:
    # Shared option checks, so each benchmark module only measures.
    from morl.runners.errors import UserError

    if args.out is not None and not str(args.out).strip():
        raise UserError("--out must be a file path")
    if getattr(args, "against", None) and args.target != "aggregators":
        raise UserError("--against applies to `morl bench aggregators` only")
    if getattr(args, "check_finite", None) and not getattr(args, "against", None):
        raise UserError("--check-finite applies with --against only")
    if getattr(args, "growth", False) and args.target != "scale":
        raise UserError("--growth applies to `morl bench scale` only")
    scale_cells = args.target == "scale" and not getattr(args, "growth", False)
    for opt in ("methods", "ks", "ds"):
        allowed = getattr(args, "against", None) or (scale_cells and opt != "ds")
        if getattr(args, opt, None) is not None and not allowed:
            also = "" if opt == "ds" else " or to `morl bench scale` (not --growth)"
            raise UserError(f"--{opt} applies with --against{also} only")
    if getattr(args, "threads", None) is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    import torch

    threads = torch.get_num_threads()
    if getattr(args, "threads", None) is not None:
        torch.set_num_threads(args.threads)
    elif getattr(args, "against", None) or args.target == "rl":  # side by side: 1 thread unless told otherwise
        torch.set_num_threads(1)
    try:
        return int(importlib.import_module(TARGETS[args.target]).run(args) or 0)
    finally:  # in-process callers (tests) get their thread count back
        torch.set_num_threads(threads)
