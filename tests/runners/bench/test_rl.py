"""``morl bench rl``: both parts run and report consistent figures (fast env here; MT10 under slow)."""

import json

import pytest
import torch

from morl.runners.bench import rl as bench_rl
from morl.runners.cli import main as morl


def test_bench_measures_every_aggregator_and_sb3_on_the_fast_env():
    result = bench_rl.measure(
        "point_mass",
        device=torch.device("cpu"),
        hidden=[32, 32],
        batch=64,
        fill_steps=20,
        loop_steps=4,
        updates=4,
        warmup=1,
    )
    loop = result["loop"]
    assert list(loop) == ["mean", "pcgrad", "cagrad", "moco"]
    assert loop["mean"]["ratio_to_mean"] == 1.0
    for name, row in loop.items():
        assert row["transitions_per_s"] == pytest.approx(4 * 1e3 / row["ms_per_iteration"])  # 4 envs per iteration
        assert row["env_ms_per_iteration"] >= 0 and row["ratio_to_mean"] > 0
        if name == "mean":  # a plain mean-loss backward: the aggregator is never called
            assert row["aggregation_ms"] is None
        else:
            assert row["aggregation_ms"] is not None and row["aggregation_ms"] >= 0
    update = result["update"]
    assert set(update["updates_per_s"]) == {"per_task", "shared", "sb3"}
    assert all(v > 0 for v in update["updates_per_s"].values())
    assert set(update["ratio_to_sb3"]) == {"per_task", "shared"} and update["per_task_vs_shared"] > 0
    report = bench_rl.format_report(result)
    assert "shared critic" in report and "stable-baselines3" in report
    for name in ("pcgrad", "cagrad", "moco"):  # each aggregator's verdict against the 0.9x floor
        assert f"{name} {loop[name]['ratio_to_mean']:.2f}x (" in report
    assert f"SB3: {update['ratio_to_sb3']['shared']:.2f}x" in report


def test_one_cpu_thread_is_timed_in_process_cpu_seconds_else_wall_time():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert bench_rl.clock(torch.device("cpu")) == "process_time"
        assert bench_rl.clock(torch.device("meta")) == "wall"
        torch.set_num_threads(2)
        assert bench_rl.clock(torch.device("cpu")) == "wall"  # CPU seconds would add up the threads
    finally:
        torch.set_num_threads(threads)


def test_sb3_baseline_has_the_same_network_sizes_and_batch():
    import morl.envs as envs

    model = bench_rl.sb3_model(envs.make_env("point_mass", seed=0), [32, 32], 64, torch.device("cpu"))
    linears = [m for m in model.actor.latent_pi.modules() if isinstance(m, torch.nn.Linear)]
    assert [m.out_features for m in linears] == [32, 32] and model.batch_size == 64


def test_the_shared_critic_row_has_sb3s_critic_and_the_default_row_one_per_task():
    import morl.envs as envs
    from morl.agents.rl.replay import MultiTaskReplay

    env, device = envs.make_env("point_mass", seed=0), torch.device("cpu")
    env.reset(seed=0)
    cfg = bench_rl._config("point_mass", [32, 32], 64, device)
    obs_dim, act_dim = env.single_observation_space.shape[0], env.single_action_space.shape[0]
    replay = MultiTaskReplay(env.num_tasks, 100, obs_dim, act_dim, device)
    sb3_critic = bench_rl.sb3_model(env, [32, 32], 64, device).critic
    sb3_sizes = sorted(p.numel() for p in sb3_critic.parameters())  # 2 MLPs, 3 linear layers each
    shared = bench_rl.critic_session(cfg, env, replay, "shared").agent.critic
    per_task = bench_rl.critic_session(cfg, env, replay, "per_task").agent.critic
    # ours stacks the twins: each of our tensors is two of SB3's, laid side by side
    assert sorted(q for p in shared.parameters() for q in (p.numel() // 2,) * 2) == sb3_sizes
    assert sum(p.numel() for p in per_task.parameters()) == env.num_tasks * sum(sb3_sizes)


@pytest.mark.integration  # builds MT10
def test_morl_bench_rl_quick_on_mt10(tmp_path):
    out = tmp_path / "rl.json"
    assert morl(["bench", "rl", "--quick", "--device", "cpu", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["env"] == "mt10" and data["batch_size"] == 1280 and data["hidden_sizes"] == [400, 400, 400]
    assert data["machine"]["threads"] == 1 and data["clock"] == "process_time"  # the side-by-side default
    assert set(data["loop"]) == {"mean", "pcgrad", "cagrad", "moco"}
