"""``morl train`` / ``morl eval`` end to end on the fast env, and bad input that must write nothing."""

import json
from pathlib import Path

import pytest
import yaml

from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl

QUICK = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart_point_mass.yaml")
TINY = [
    "agent.hidden_sizes=[32,32]",
    "agent.batch_size=64",
    "agent.buffer_capacity=4000",
    "run.device=cpu",
    "run.warmup_steps=20",
    "run.log_every=20",
    "run.eval_every=30",
    "run.checkpoint_every=30",
    "run.eval_episodes=1",
    "aggregator.name=pcgrad",
    "aggregator.options={}",
]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("morl: error: "), err
    return err[0]


@pytest.mark.parametrize(
    "args, words",
    [
        ([QUICK, "agent.batch_sise=64"], ["agent.batch_sise", "batch_size"]),
        ([QUICK, "run.total_steps=lots"], ["run.total_steps", "integer"]),
        (["configs/does_not_exist.yaml"], ["does_not_exist.yaml", "does not exist"]),
        ([QUICK, "aggregator.name=nash"], ["aggregator.name", "nash", "cagrad", "mgda", "moco", "pcgrad"]),
        ([QUICK, "aggregator.options={c: 0.5, typo: 1}"], ["aggregator.options", "typo", "c"]),
        ([QUICK, "env.name=mt11"], ["env.name", "mt11", "mt10", "point_mass"]),
        ([QUICK, "env.name=mt1:reach-v9"], ["reach-v9", "reach-v3"]),
        ([QUICK, "agent.batch_size=2"], ["agent.batch_size", "number of tasks"]),
    ],
)
def test_bad_input_fails_with_one_line_and_writes_nothing(args, words, tmp_path, capsys):
    out_dir = tmp_path / "runs"
    assert morl(["train", *args, f"run.out_dir={out_dir}"]) == 2
    line = _one_error_line(capsys)
    for word in words:
        assert word in line
    assert not out_dir.exists()


def _tags(run_dir: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = set()
    for f in (run_dir / "tb").glob("events.*"):
        acc = EventAccumulator(str(f))
        acc.Reload()
        tags |= set(acc.Tags()["scalars"]) | set(acc.Tags()["tensors"])
    return tags


def test_train_writes_a_complete_run_directory_and_eval_reads_it(tmp_path, capsys):
    out_dir = tmp_path / "runs"
    assert morl(["train", QUICK, *TINY, "run.total_steps=60", f"run.out_dir={out_dir}", "run.name=tiny"]) == 0
    (run_dir,) = out_dir.iterdir()
    assert run_dir.name.startswith("tiny-")
    printed = capsys.readouterr().out  # where the run is, how to watch and evaluate it
    assert "building the point_mass environments" in printed
    assert f"tensorboard --logdir {run_dir / 'tb'}" in printed and f"morl eval {run_dir}" in printed

    saved = yaml.safe_load((run_dir / "config.yaml").read_text())  # the resolved config, overrides applied
    assert saved["agent"]["hidden_sizes"] == [32, 32] and saved["aggregator"]["name"] == "pcgrad"
    assert saved["run"]["total_steps"] == 60 and saved["env"]["name"] == "point_mass"

    ckpt = torch_load(run_dir / "checkpoints" / "last.pt")
    assert ckpt["step"] == 60 and ckpt["updates"] == 40
    for key in ("agent", "replay", "env", "eval_env", "rng", "stats"):
        assert key in ckpt
    assert {"python", "numpy", "torch", "sample_gen", "action_rng"} <= set(ckpt["rng"])
    assert {
        "actor",
        "critic",
        "critic_target",
        "actor_opt",
        "critic_opt",
        "alpha_opt",
        "log_alpha",
        "aggregator",
    } <= set(ckpt["agent"])
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*.pt")) == [
        "step_000000030.pt",
        "step_000000060.pt",
    ]

    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_lines = [x for x in lines if x["kind"] == "train"]
    eval_lines = [x for x in lines if x["kind"] == "eval"]
    assert [x["step"] for x in train_lines] == [20, 40, 60] and [x["step"] for x in eval_lines] == [30, 60]
    assert all(x["perf/eval_seconds"] > 0 for x in eval_lines)
    last = train_lines[-1]
    assert set(last["loss/actor"]) == {"goal-0", "goal-1", "goal-2", "goal-3", "mean"}
    assert last["perf/transitions_per_s"] > 0 and 0 <= last["perf/aggregation_fraction"] <= 1
    assert 0 <= last["grad/conflicting_pairs"] <= 6  # 4 tasks -> 6 pairs
    # the aggregator is timed through forward hooks and its device counters reach the log
    assert last["perf/aggregation_ms"] > 0 and last["aggregator/nonfinite_steps"] == 0

    info = json.loads((run_dir / "run.json").read_text())  # what resume/eval/sweep dispatch on
    assert (info["kind"], info["status"], info["position"], info["total"], info["unit"]) == (
        "rl",
        "finished",
        60,
        60,
        "step",
    )
    final = json.loads((run_dir / "final_metrics.json").read_text())
    assert final["step"] == 60 and final["headline"] == eval_lines[-1]["eval/success"]["mean"]
    assert final["eval/success"] == eval_lines[-1]["eval/success"]

    _assert_comparison_views(run_dir, final["headline"])

    tags = _tags(run_dir)
    expected = [
        "train/success/mean",
        "train/return/goal-2",
        "eval/success/goal-0",
        "eval/success/mean",
        "eval/return/mean",
        "loss/actor/goal-1",
        "loss/critic/goal-3",
        "alpha/goal-0",
        "aggregator/weight/goal-2",
        "grad/cos_min",
        "grad/cos_mean",
        "grad/conflicting_pairs",
        "grad/norm_pre_aggregation",
        "grad/norm_post_aggregation",
        "perf/transitions_per_s",
        "perf/env_fraction",
        "perf/update_fraction",
        "perf/aggregation_fraction",
        "perf/eval_seconds",
        "aggregator/nonfinite_steps",
        "config/text_summary",
    ]
    assert not [t for t in expected if t not in tags]
    capsys.readouterr()

    assert morl(["eval", str(run_dir), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "goal-3" in out and "mean" in out
    result = json.loads((run_dir / "eval" / "step_000000060.json").read_text())
    assert result["episodes_per_task"] == 2 and result["step"] == 60 and result["kind"] == "rl"
    assert set(result["eval/success"]) == {"goal-0", "goal-1", "goal-2", "goal-3", "mean"}
    assert all(0.0 <= v <= 1.0 for v in result["eval/success"].values())
    assert result["headline"] == result["eval/success"]["mean"]


def test_eval_and_resume_reject_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert morl(["eval", str(tmp_path)]) == 2
    assert "not a morl run directory" in _one_error_line(capsys)
    assert morl(["resume", str(tmp_path / "missing")]) == 2
    assert "does not exist" in _one_error_line(capsys)


@pytest.mark.integration  # an 800-step learning run
def test_morl_train_learns_the_fast_env(tmp_path, capsys):
    # The quickstart recipe with the mean aggregator: 4 conflicting goals, 800 steps (200 random).
    # Seeds 0, 1, 2 all reach 100% here; a policy that ignores the task one-hot reaches at most 25%.
    out_dir = tmp_path / "runs"
    assert (
        morl(
            [
                "train",
                QUICK,
                "aggregator.name=mean",
                "aggregator.options={}",
                "run.total_steps=800",
                "run.eval_every=400",
                "run.device=cpu",
                f"run.out_dir={out_dir}",
            ]
        )
        == 0
    )
    (run_dir,) = out_dir.iterdir()
    evals = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"eval"' in x]
    assert [e["step"] for e in evals] == [400, 800]
    assert evals[-1]["eval/success"]["mean"] >= 0.9


def _assert_comparison_views(run_dir, headline: float) -> None:
    """TensorBoard's custom-scalars layout names every task's success, and the HParams view has
    this run as one session carrying its final metrics (written by the shell for every kind)."""
    from tensorboard.plugins.custom_scalar import custom_scalars_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups

    from tests.runners.test_tb_layout import _backend

    _, tb, ctx = _backend(run_dir)
    layout = json.loads(custom_scalars_plugin.CustomScalarsPlugin(tb).layout_impl(ctx, ""))
    charts = {c["title"]: c["multiline"]["tag"] for c in layout["category"][0]["chart"]}
    assert charts["eval success, every task"] == [f"^eval/success/goal\\-{i}$" for i in range(4)]
    request = api_pb2.ListSessionGroupsRequest(
        start_index=0, slice_size=10, allowed_statuses=[api_pb2.STATUS_SUCCESS, api_pb2.STATUS_UNKNOWN]
    )
    (group,) = list_session_groups.Handler(ctx, backend_context.Context(tb), "", request).run().session_groups
    assert group.name == "tb/hparams"
    assert group.hparams["aggregator.name"].string_value == "pcgrad"
    values = {m.name.tag: m.value for m in group.sessions[0].metric_values}
    assert values["final/headline"] == pytest.approx(headline)
