"""``morl bench rl``: MT10 training throughput per aggregator, and our MT-SAC update against SB3's SAC.

Part 1 (transitions/s): the real training iteration (``morl.runners.rl.iteration.iterate``: policy action ->
MT10 step of all 10 envs -> store -> sample 128 per task -> one MT-SAC update) with the mean,
PCGrad, CAGrad (c = 0.9) and MoCo aggregators, each as a ratio to mean. Target: CAGrad >= 0.85x.

Part 2 (updates/s, update only): N gradient updates on a buffer filled with the same MT10
transitions, our MT-SAC (mean) against stable-baselines3's ``SAC`` with the same network sizes
(3 x 400) and batch (1280). Target: ours >= 1.5x SB3 per update.

Both parts run in one process on one device with the same settings. The compared runs take
turns call by call, and the figures are medians (ratios: medians of per-pair ratios), so a
machine whose speed drifts during the benchmark biases none of them. Figures go to
docs/benchmarks.md with the command and machine.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from typing import Any

import numpy as np
import torch

AGGREGATORS: dict[str, dict[str, Any]] = {"mean": {}, "pcgrad": {}, "cagrad": {"c": 0.9}, "moco": {}}
TARGETS = {"cagrad_vs_mean": 0.85, "ours_vs_sb3": 1.5}
FULL = {"fill_steps": 200, "loop_steps": 100, "updates": 100, "warmup": 5}
QUICK = {"fill_steps": 30, "loop_steps": 8, "updates": 8, "warmup": 2}


def run(args) -> int:
    from morl.runners.bench.aggregators import _machine
    from morl.runners.device import resolve_device

    device = resolve_device(getattr(args, "device", "auto"))
    quick = bool(getattr(args, "quick", False))
    out = getattr(args, "out", None)
    sizes = QUICK if quick else FULL
    machine = _machine(device)
    print(
        f"morl bench rl on {machine['device_name']} (torch {torch.__version__}, {torch.get_num_threads()} threads)"
        f"{' --quick' if quick else ''}",
        flush=True,
    )
    result = measure("mt10", device=device, **sizes)
    print(format_report(result))
    if out:
        from morl.runners.checkpoint import atomic_write_text

        atomic_write_text(
            out, json.dumps({"machine": machine, "quick": quick, "settings": sizes, **result}, indent=2) + "\n"
        )
        print(f"wrote {out}")
    return 0


def _config(env_name: str, hidden: list[int], batch: int, device: torch.device):
    from morl.runners.rl.config import load_rl_config

    return load_rl_config(
        None,
        [
            f"env.name={env_name}",
            f"agent.hidden_sizes={hidden}",
            f"agent.batch_size={batch}",
            "agent.buffer_capacity=200000",
            f"run.device={device}",
            "run.warmup_steps=0",
            "run.log_every=1000000000",
            "run.name=bench",
        ],
    )


def _session(cfg, env, replay, aggregator: str, options: dict[str, Any]):
    from morl.runners.rl.config import AggregatorConfig
    from morl.runners.rl.metrics import LoopStats
    from morl.runners.rl.session import Session, build_agent

    cfg = dataclasses.replace(cfg, aggregator=AggregatorConfig(aggregator, dict(options)))
    device = torch.device(cfg.run.device)
    torch.manual_seed(cfg.run.seed)
    agent, agg = build_agent(cfg, env, device)
    gen = torch.Generator(device=device).manual_seed(1)
    return Session(
        cfg=cfg,
        device=device,
        env=env,
        eval_env=None,
        agent=agent,
        aggregator=agg,
        replay=replay,
        sample_gen=gen,
        action_rng=np.random.default_rng(2),
        obs=env.observations(),
        stats=LoopStats(env.num_tasks),
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _fill(env, replay, steps: int, rng: np.random.Generator, sb3_buffer=None) -> None:
    """Random-action transitions of the real env, stored in our replay (and SB3's, if given)."""
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        action = rng.uniform(-1, 1, (env.num_envs, env.single_action_space.shape[0])).astype(np.float32)
        next_obs, reward, terminated, truncated, info = env.step(action)
        replay.add(env.task_ids, obs, action, reward, info["final_obs"], terminated)
        if sb3_buffer is not None:
            infos = [{"TimeLimit.truncated": bool(t)} for t in truncated]
            sb3_buffer.add(obs, info["final_obs"], action, reward, terminated | truncated, infos)
        obs = next_obs


def _interleaved(fns: dict[str, Any], repeats: int, device: torch.device) -> dict[str, list[float]]:
    """Seconds of each call of each function, the functions taking turns call by call (ABBA
    order), so that on a machine whose speed drifts (other load, clocks) every function sees
    the same conditions; medians and per-pair ratios of these are robust to load spikes."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for i in range(repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            _sync(device)
            t0 = time.perf_counter()
            fns[name]()
            _sync(device)
            times[name].append(time.perf_counter() - t0)
    return times


def loop_throughput(cfg, env, replay, aggregators: dict[str, dict], loop_steps: int, warmup: int) -> dict[str, dict]:
    """Transitions/s of the full training iteration (median iteration) for each aggregator, and
    its ratio to ``mean`` (median over interleaved pairs of iterations)."""
    from morl.runners.rl.iteration import iterate
    from morl.runners.rl.metrics import AggregationTimer, SectionTimer

    sessions = {name: _session(cfg, env, replay, name, options) for name, options in aggregators.items()}
    timers = {name: (SectionTimer(), AggregationTimer(s.aggregator, s.device)) for name, s in sessions.items()}

    def step(name: str):
        def fn() -> None:
            s = sessions[name]
            s.obs = env.observations()  # the sessions share the env: continue from its current state
            iterate(s, *timers[name])

        return fn

    fns = {name: step(name) for name in sessions}
    device = next(iter(sessions.values())).device
    _interleaved(fns, warmup, device)
    for timer, agg_timer in timers.values():
        timer.reset()
        agg_timer.reset()
    times = _interleaved(fns, loop_steps, device)
    rows = {}
    for name, t in times.items():
        timer, agg_timer = timers[name]
        rows[name] = {
            "transitions_per_s": env.num_envs / statistics.median(t),
            "ms_per_iteration": statistics.median(t) * 1e3,
            "env_ms_per_iteration": timer.seconds.get("env", 0.0) / loop_steps * 1e3,
            "aggregation_ms": agg_timer.per_call() * 1e3 if agg_timer.calls else None,
            "ratio_to_mean": statistics.median(a / b for a, b in zip(times["mean"], t)) if "mean" in times else None,
        }
    return rows


def sb3_model(env, hidden: list[int], batch: int, device: torch.device):
    """stable-baselines3's plain SAC on the same env, same network sizes and batch."""
    from stable_baselines3 import SAC

    from morl.agents.rl.sb3 import SB3VecEnv, folderless_logger

    model = SAC(
        "MlpPolicy",
        SB3VecEnv(env),
        batch_size=batch,
        buffer_size=200_000,
        learning_starts=0,
        policy_kwargs={"net_arch": list(hidden)},
        device=device,
        seed=0,
        verbose=0,
    )
    model.set_logger(folderless_logger())
    return model


def update_throughput(cfg, env, replay, sb3, updates: int, warmup: int) -> dict[str, float]:
    """Updates/s on a filled buffer (median update): our MT-SAC (mean) and SB3's SAC, interleaved."""
    s = _session(cfg, env, replay, "mean", {})
    count = iter(range(10**9))

    def ours() -> None:
        # as in training between two log points: no conflict statistics (they cost the mean
        # aggregator a per-task gradient pass once per log interval)
        s.agent.update(s.replay.sample(s.per_task_batch, s.sample_gen), next(count), diagnostics=False)

    def theirs() -> None:
        sb3.train(gradient_steps=1, batch_size=cfg.agent.batch_size)

    fns = {"ours": ours, "sb3": theirs}
    _interleaved(fns, warmup, s.device)
    t = _interleaved(fns, updates, s.device)
    return {
        "ours_updates_per_s": 1.0 / statistics.median(t["ours"]),
        "sb3_updates_per_s": 1.0 / statistics.median(t["sb3"]),
        "ours_vs_sb3": statistics.median(b / a for a, b in zip(t["ours"], t["sb3"])),
    }


def measure(
    env_name: str = "mt10",
    *,
    device: torch.device,
    hidden: list[int] | None = None,
    batch: int = 1280,
    fill_steps: int,
    loop_steps: int,
    updates: int,
    warmup: int,
    aggregators: dict[str, dict] | None = None,
) -> dict[str, Any]:
    """Both parts of the benchmark on ``env_name`` (``mt10`` for the recorded figures)."""
    import morl.envs as envs
    from morl.agents.rl.replay import MultiTaskReplay

    hidden = hidden or [400, 400, 400]
    cfg = _config(env_name, hidden, batch, device)
    env = envs.make_env(env_name, seed=0)
    obs_dim, act_dim = env.single_observation_space.shape[0], env.single_action_space.shape[0]
    replay = MultiTaskReplay(env.num_tasks, cfg.agent.buffer_capacity // env.num_tasks, obs_dim, act_dim, device)
    sb3 = sb3_model(env, hidden, batch, device)
    _fill(env, replay, fill_steps, np.random.default_rng(0), sb3.replay_buffer)

    print(
        f"part 1: training iteration on {env_name} ({env.num_envs} envs, batch {batch}, {hidden} networks)", flush=True
    )
    loop = loop_throughput(cfg, env, replay, aggregators or AGGREGATORS, loop_steps, warmup)
    print(f"part 2: update only, {updates} updates, batch {batch}", flush=True)
    update = update_throughput(cfg, env, replay, sb3, updates, warmup)
    return {
        "env": env_name,
        "hidden_sizes": hidden,
        "batch_size": batch,
        "loop": loop,
        "update": update,
        "targets": TARGETS,
    }


def format_report(result: dict[str, Any]) -> str:
    lines = [f"{'aggregator':<10} {'transitions/s':>14} {'x mean':>7} {'ms/iter':>8} {'env ms':>7} {'agg ms':>7}"]
    for name, row in result["loop"].items():
        agg = "-" if row["aggregation_ms"] is None else f"{row['aggregation_ms']:.2f}"
        ratio = "-" if row["ratio_to_mean"] is None else f"{row['ratio_to_mean']:.2f}"
        lines.append(
            f"{name:<10} {row['transitions_per_s']:14.1f} {ratio:>7} {row['ms_per_iteration']:8.1f} "
            f"{row['env_ms_per_iteration']:7.1f} {agg:>7}"
        )
    u = result["update"]
    lines.append("")
    lines.append(
        f"update only: ours (MT-SAC, mean) {u['ours_updates_per_s']:.2f} updates/s, "
        f"stable-baselines3 SAC {u['sb3_updates_per_s']:.2f} updates/s -> {u['ours_vs_sb3']:.2f}x"
    )
    cagrad = result["loop"].get("cagrad", {}).get("ratio_to_mean")
    if cagrad is not None:
        lines.append(
            f"targets: CAGrad >= {TARGETS['cagrad_vs_mean']}x mean: {cagrad:.2f}x "
            f"({'met' if cagrad >= TARGETS['cagrad_vs_mean'] else 'NOT met'}); "
            f"ours >= {TARGETS['ours_vs_sb3']}x SB3: {u['ours_vs_sb3']:.2f}x "
            f"({'met' if u['ours_vs_sb3'] >= TARGETS['ours_vs_sb3'] else 'NOT met'})"
        )
    return "\n".join(lines)
