"""``morl train CONFIG [key=value ...]``: train MT-SAC with a gradient aggregator from a YAML config."""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("config", help="YAML config, e.g. configs/mt10_cagrad.yaml (keys: docs/configs.md)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="nested overrides, e.g. agent.batch_size=256 run.device=cpu")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar (shown only on a terminal anyway)")


def main(args) -> int:
    from morl.runners.rl.config import load_rl_config
    from morl.runners.rl.runs import start_run

    cfg = load_rl_config(args.config, args.overrides)
    start_run(cfg, progress=False if args.no_progress else None)
    return 0
