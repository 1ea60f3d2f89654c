"""``morl bench TARGET``: benchmarks whose figures go into docs/benchmarks.md."""

from __future__ import annotations

import importlib

TARGETS: dict[str, str] = {
    "aggregators": "runners.bench_aggregators",
    "rl": "runners.bench_rl",
    "most": "runners.bench_most",
}


def add_arguments(parser) -> None:
    parser.add_argument("target", choices=sorted(TARGETS), help="what to measure")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (smoke run)")
    parser.add_argument("--out", default=None, help="also write the results as JSON to this path")


def main(args) -> int:
    # Shared option checks, so each benchmark module only measures.
    from runners.errors import UserError

    if args.out is not None and not str(args.out).strip():
        raise UserError("--out must be a file path")
    return int(importlib.import_module(TARGETS[args.target]).run(args) or 0)
