"""Run directories of RL training: start a run, resume it, evaluate its checkpoint.

Order matters for "nothing written on bad input": the config is validated and the whole
session (environments, aggregator, agent, replay buffer) is built BEFORE the run directory
is created, so any error leaves no trace on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from morl.runners.errors import UserError
from morl.runners.rl.config import RLConfig, config_dict, config_from_dict

# `morl resume` may change these; everything else is fixed by the checkpoint.
RESUMABLE_KEYS = ("total_steps", "eval_every", "eval_episodes", "log_every", "checkpoint_every", "keep_checkpoints", "device")


def start_run(cfg: RLConfig, progress: bool | None = None) -> Path:
    """``morl train``: build everything, create the run directory, train to the end."""
    from morl.runners.config import save_config
    from morl.runners.rl.session import build_session
    from morl.runners.run_dir import CONFIG_FILE, new_run_dir
    from morl.runners.tensorboard import RunLogger, flatten_config

    session = build_session(cfg)
    run_dir = new_run_dir(cfg.run.out_dir, cfg.run.name)
    save_config(cfg, run_dir / CONFIG_FILE)
    print(f"morl: run directory {run_dir}", flush=True)
    logger = RunLogger(run_dir)
    logger.hparams(flatten_config(config_dict(cfg)))
    _train_and_report(session, run_dir, logger, progress)
    return run_dir


def load_run_config(run_dir: Path, overrides: list[str] | None = None) -> RLConfig:
    """The config saved in ``run_dir`` with optional ``run.<key>=value`` overrides."""
    from morl.runners.config import apply_overrides, read_yaml
    from morl.runners.run_dir import CONFIG_FILE

    data = read_yaml(run_dir / CONFIG_FILE)
    for item in overrides or []:
        key = item.split("=", 1)[0].strip()
        if not key.startswith("run.") or key[4:] not in RESUMABLE_KEYS:
            raise UserError(f"override {key!r} cannot change a started run; allowed: " + ", ".join(f"run.{k}" for k in RESUMABLE_KEYS))
    return config_from_dict(apply_overrides(data, list(overrides or [])))


def resume_run(run_dir: str | Path, overrides: list[str] | None = None, progress: bool | None = None) -> Path:
    """``morl resume``: restore ``checkpoints/last.pt`` and continue to ``run.total_steps``."""
    from morl.runners.checkpoint import torch_load
    from morl.runners.config import save_config
    from morl.runners.rl.session import build_session, load_session_state
    from morl.runners.run_dir import CONFIG_FILE, check_config_unchanged, claim_run_dir, drop_records_after, existing_run_dir, last_checkpoint
    from morl.runners.tensorboard import RunLogger

    run_dir = existing_run_dir(run_dir)
    cfg = load_run_config(run_dir, overrides)
    claim_run_dir(run_dir)
    checkpoint = last_checkpoint(run_dir)
    session = build_session(cfg)
    state = torch_load(checkpoint, map_location=session.device)
    check_config_unchanged(run_dir, config_dict(cfg), list(overrides or []), stored=state.get("config"))
    load_session_state(session, state)
    if session.step >= cfg.run.total_steps:
        print(f"morl: run already finished ({session.step}/{cfg.run.total_steps} steps); raise run.total_steps to continue")
        return run_dir
    if overrides:
        save_config(cfg, run_dir / CONFIG_FILE)
    drop_records_after(run_dir / "metrics.jsonl", session.step)
    print(f"morl: resuming {run_dir} at step {session.step}/{cfg.run.total_steps}", flush=True)
    # purge_step drops TensorBoard events logged after the checkpoint (they will be redone).
    logger = RunLogger(run_dir, purge_step=session.step + 1)
    _train_and_report(session, run_dir, logger, progress)
    return run_dir


def _train_and_report(session, run_dir: Path, logger, progress: bool | None) -> None:
    from morl.runners.rl.loop import train

    try:
        result = train(session, run_dir, logger, progress=progress)
    finally:
        logger.close()
    _print_result(result)


def evaluate_run(run_dir: str | Path, checkpoint: str | None = None, episodes: int | None = None, device: str | None = None) -> dict[str, Any]:
    """``morl eval``: load a checkpoint's agent, evaluate it, print and write per-task success."""
    from morl.runners.checkpoint import atomic_write_text, torch_load
    from morl.runners.device import resolve_device
    from morl.runners.rl.loop import eval_episodes, evaluate_agent
    from morl.runners.rl.session import agent_state_for, build_agent, make_envs, seed_everything
    from morl.runners.run_dir import existing_run_dir, last_checkpoint

    run_dir = existing_run_dir(run_dir)
    cfg = load_run_config(run_dir, [f"run.device={device}"] if device else None)
    if episodes is not None and episodes < 1:
        raise UserError(f"--episodes must be >= 1, got {episodes}")
    ckpt_path = Path(checkpoint) if checkpoint else last_checkpoint(run_dir)
    if not ckpt_path.is_file():
        raise UserError(f"checkpoint {str(ckpt_path)!r} does not exist")
    dev = resolve_device(cfg.run.device)
    state = torch_load(ckpt_path, map_location=dev)
    seed_everything(cfg.run.seed)
    _, eval_env = make_envs(cfg, eval_only=True)
    agent, _ = build_agent(cfg, eval_env, dev)
    agent.load_state_dict(agent_state_for(agent, state, state.get("device_type") == dev.type))
    n = episodes or eval_episodes(cfg)
    result = evaluate_agent(agent, eval_env, dev, n)
    out = {
        "checkpoint": str(ckpt_path),
        "step": int(state["step"]),
        "episodes_per_task": n,
        "success": dict(zip(result["task_names"], map(float, result["success"]))),
        "return": dict(zip(result["task_names"], map(float, result["return"]))),
        "mean_success": float(np.mean(result["success"])),
        "mean_return": float(np.mean(result["return"])),
    }
    _print_table(out)
    path = run_dir / "eval" / f"step_{out['step']:09d}.json"
    atomic_write_text(path, json.dumps(out, indent=2) + "\n")
    print(f"morl: wrote {path}")
    return out


def _print_table(out: dict[str, Any]) -> None:
    print(f"evaluation of {out['checkpoint']} (step {out['step']}, {out['episodes_per_task']} episode(s) per task)")
    width = max(len(name) for name in out["success"])
    print(f"{'task':<{width}}  success   return")
    for name in out["success"]:
        print(f"{name:<{width}}  {out['success'][name]:7.3f}  {out['return'][name]:7.1f}")
    print(f"{'mean':<{width}}  {out['mean_success']:7.3f}  {out['mean_return']:7.1f}")


def _print_result(result: dict[str, Any]) -> None:
    if result:
        print(f"morl: final evaluation at step {result['step']}: mean success {result['success']['mean']:.3f}")
