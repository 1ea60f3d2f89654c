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
    assert update["ours_updates_per_s"] > 0 and update["sb3_updates_per_s"] > 0 and update["ours_vs_sb3"] > 0
    report = bench_rl.format_report(result)
    assert "cagrad" in report and "stable-baselines3" in report and "targets" in report


def test_sb3_baseline_has_the_same_network_sizes_and_batch():
    import morl.envs as envs

    model = bench_rl.sb3_model(envs.make_env("point_mass", seed=0), [32, 32], 64, torch.device("cpu"))
    linears = [m for m in model.actor.latent_pi.modules() if isinstance(m, torch.nn.Linear)]
    assert [m.out_features for m in linears] == [32, 32] and model.batch_size == 64


@pytest.mark.integration  # builds MT10
def test_morl_bench_rl_quick_on_mt10(tmp_path):
    out = tmp_path / "rl.json"
    assert morl(["bench", "rl", "--quick", "--device", "cpu", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["env"] == "mt10" and data["batch_size"] == 1280 and data["hidden_sizes"] == [400, 400, 400]
    assert set(data["loop"]) == {"mean", "pcgrad", "cagrad", "moco"}
