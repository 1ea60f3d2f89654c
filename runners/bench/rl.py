"""``morl bench rl``: MT10 training throughput per aggregator, and our MT-SAC update against SB3's SAC.

Part 1 (transitions/s): the real training iteration (``morl.runners.rl.iteration.iterate``: policy action ->
MT10 step of all 10 envs -> store -> sample 128 per task -> one MT-SAC update) with the mean,
PCGrad, CAGrad (c = 0.9) and MoCo aggregators, each as a ratio to mean. Target: every one >= 0.9x.

Part 2 (updates/s, update only): gradient updates on a buffer filled with the same MT10
transitions: our MT-SAC (mean) with its default per-task critics, the same with one shared critic
(``agent.critic: shared``, SB3's critic architecture: the like-for-like row), and
stable-baselines3's ``SAC`` with the same network sizes (3 x 400) and batch (1280).
Target: ours with the shared critic >= 1.2x SB3 per update; the per-task critics' row shows what
T twin critics cost on top.

Both parts run in one process on one device with the same settings (``morl bench`` sets 1
intra-op thread unless ``--threads``). The compared runs take turns call by call (ABBA), and the
figures are medians (ratios: medians of per-pair ratios), so a machine whose speed drifts
during the benchmark biases none of them; on a CPU with one thread each call is timed in the
process's CPU seconds (:func:`clock`), so other processes' time slices count for neither side.
Figures go to docs/benchmarks.md with the command.
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
TARGETS = {"aggregator_vs_mean": 0.9, "shared_vs_sb3": 1.2}
CRITICS = ("per_task", "shared")  # our update's rows in part 2 (agent.critic)
FULL = {"fill_steps": 200, "loop_steps": 100, "updates": 100, "warmup": 5}
QUICK = {"fill_steps": 30, "loop_steps": 16, "updates": 16, "warmup": 2}


def run(args) -> int:
    from morl.runners.bench.aggregators import _machine
    from morl.runners.device import resolve_device

    device = resolve_device(getattr(args, "device", "auto"))
    quick = bool(getattr(args, "quick", False))
    out = getattr(args, "out", None)
    sizes = QUICK if quick else FULL
    machine = _machine(device)
    print(
        f"morl bench rl on {machine['device_name']} (torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"clock: {clock(device)}){' --quick' if quick else ''}",
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


def clock(device: torch.device) -> str:
    """``process_time`` on a CPU with one intra-op thread: the process's CPU seconds, which other
    processes' time slices on a shared machine do not inflate; else ``wall`` (after a device sync)."""
    return "process_time" if device.type == "cpu" and torch.get_num_threads() == 1 else "wall"


def _now(device: torch.device):
    return time.process_time if clock(device) == "process_time" else time.perf_counter


def _interleaved(fns: dict[str, Any], repeats: int, device: torch.device) -> dict[str, list[float]]:
    """Seconds of each call of each function, the functions taking turns call by call (ABBA
    order), so that on a machine whose speed drifts (other load, clocks) every function sees
    the same conditions; medians and per-pair ratios of these are robust to load spikes."""
    now = _now(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for i in range(repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            _sync(device)
            t0 = now()
            fns[name]()
            _sync(device)
            times[name].append(now() - t0)
    return times


def loop_throughput(cfg, env, replay, aggregators: dict[str, dict], loop_steps: int, warmup: int) -> dict[str, dict]:
    """Transitions/s of the full training iteration (median iteration) for each aggregator, and
    its ratio to ``mean`` (median over interleaved pairs of iterations)."""
    from morl.runners.rl.iteration import iterate
    from morl.runners.rl.metrics import AggregationTimer, SectionTimer

    sessions = {name: _session(cfg, env, replay, name, options) for name, options in aggregators.items()}
    device = next(iter(sessions.values())).device
    now = _now(device)  # the env and aggregation columns on the iterations' clock
    timers = {name: (SectionTimer(now), AggregationTimer(s.aggregator, s.device, now)) for name, s in sessions.items()}

    def step(name: str):
        def fn() -> None:
            s = sessions[name]
            s.obs = env.observations()  # the sessions share the env: continue from its current state
            iterate(s, *timers[name])

        return fn

    fns = {name: step(name) for name in sessions}
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


def critic_session(cfg, env, replay, critic: str):
    """A session of our MT-SAC (mean) with ``agent.critic`` set to ``critic`` (per_task or shared)."""
    return _session(
        dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, critic=critic)), env, replay, "mean", {}
    )


def update_throughput(cfg, env, replay, sb3, updates: int, warmup: int) -> dict[str, Any]:
    """Updates/s on a filled buffer (median update) of our MT-SAC (mean) with per-task and with
    shared critics, and of SB3's SAC, interleaved; each of ours as a ratio to SB3 and to each other."""
    counts = iter(range(10**9))

    def ours(critic: str):
        s = critic_session(cfg, env, replay, critic)

        def fn() -> None:
            # as in training between two log points: no conflict statistics (they cost the mean
            # aggregator a per-task gradient pass once per log interval)
            s.agent.update(s.replay.sample(s.per_task_batch, s.sample_gen), next(counts), diagnostics=False)

        return fn

    def theirs() -> None:
        sb3.train(gradient_steps=1, batch_size=cfg.agent.batch_size)

    fns = {**{critic: ours(critic) for critic in CRITICS}, "sb3": theirs}
    device = torch.device(cfg.run.device)
    _interleaved(fns, warmup, device)
    t = _interleaved(fns, updates, device)
    return {
        "updates_per_s": {name: 1.0 / statistics.median(v) for name, v in t.items()},
        "ratio_to_sb3": {c: statistics.median(b / a for a, b in zip(t[c], t["sb3"])) for c in CRITICS},
        "per_task_vs_shared": statistics.median(b / a for a, b in zip(t["per_task"], t["shared"])),
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
        "clock": clock(device),
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
    per_s, to_sb3 = u["updates_per_s"], u["ratio_to_sb3"]
    lines += [
        "",
        f"{'update only':<34} {'updates/s':>9} {'x SB3':>6}",
        f"{'ours (mean), per-task critics':<34} {per_s['per_task']:9.2f} {to_sb3['per_task']:6.2f}",
        f"{'ours (mean), shared critic':<34} {per_s['shared']:9.2f} {to_sb3['shared']:6.2f}",
        f"{'stable-baselines3 SAC':<34} {per_s['sb3']:9.2f} {1.0:6.2f}",
        f"per-task critics vs shared critic: {u['per_task_vs_shared']:.2f}x",
    ]
    floor, aggregators = TARGETS["aggregator_vs_mean"], []
    for name, row in result["loop"].items():
        if name != "mean" and row["ratio_to_mean"] is not None:
            aggregators.append(f"{name} {row['ratio_to_mean']:.2f}x ({_verdict(row['ratio_to_mean'] >= floor)})")
    if aggregators:
        lines.append(f"target: >= {floor}x mean: {', '.join(aggregators)}")
    shared = to_sb3["shared"]
    lines.append(
        f"target: ours (shared critic) >= {TARGETS['shared_vs_sb3']}x SB3: {shared:.2f}x "
        f"({_verdict(shared >= TARGETS['shared_vs_sb3'])})"
    )
    return "\n".join(lines)


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"
