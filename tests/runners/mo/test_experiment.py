"""``morl train`` on an ``mo`` config end to end: the run directory (metrics.jsonl, TensorBoard
scalars and front figures, checkpoints, run.json), ``morl eval``, a crashed run resumed bitwise,
``morl report`` over seeds and a sweep's dispatch; the learning check in the integration tier."""

import functools
import itertools
import json
from types import SimpleNamespace

import pytest

import morl.runners.mo.session as mo_session
import morl.runners.rl.sac_experiment as sac_experiment
from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from morl.runners.mo.config import load_mo_config
from morl.runners.shell.commands import start
from tests.runners.mo.runs import QUICK, TINY
from tests.state_equality import assert_state_equal


def _records(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _images(run_dir) -> dict[str, list[int]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps = {}
    for f in (run_dir / "tb").glob("events.*"):
        acc = EventAccumulator(str(f), size_guidance={"images": 0})
        acc.Reload()
        for tag in acc.Tags()["images"]:
            steps.setdefault(tag, []).extend(e.step for e in acc.Images(tag))
    return steps


def test_train_writes_a_complete_run_directory_and_eval_reads_it(tmp_path, capsys):
    out_dir = tmp_path / "runs"
    assert morl(["train", QUICK, *TINY, "run.total_steps=12", f"run.out_dir={out_dir}", "run.name=tiny"]) == 0
    (run_dir,) = out_dir.iterdir()
    assert "MO-SAC population" in capsys.readouterr().out
    info = json.loads((run_dir / "run.json").read_text())
    assert (info["kind"], info["status"], info["position"]) == ("mo", "finished", 12)
    records = _records(run_dir)
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [10, 12]  # every eval_every steps and at the end
    assert [r["step"] for r in records if r["kind"] == "train"] == [5, 10, 12]
    last = evals[-1]
    for key in ("eval/hv", "eval/eum", "eval/sparsity", "eval/cardinality", "eval/undiscounted/hv", "eval/hv_best"):
        assert isinstance(last[key], float), key
    assert last["headline"] == last["eval/hv"] > 0
    assert set(last["eval/discounted_return/forward_velocity"]) == {"p0", "p1"}
    train = records[-2] if records[-1]["kind"] == "eval" else records[-1]
    assert set(train["loss/critic/control_cost"]) == {"p0", "p1"} and set(train["alpha"]) == {"p0", "p1"}
    assert train["aggregator/weight/forward_velocity"] == {"p0": 1.0, "p1": 0.0}  # linear: the preferences
    assert train["train/preferences/forward_velocity"] == {"p0": 1.0, "p1": 0.0}
    assert _images(run_dir) == {"eval/front": [10, 12]}
    final = json.loads((run_dir / "final_metrics.json").read_text())
    assert final["eval/hv"] == last["eval/hv"] and final["step"] == 12
    ckpt = torch_load(run_dir / "checkpoints" / "last.pt")
    assert ckpt["kind"] == "mo" and ckpt["updates"] == 4 and ckpt["replay"]["reward_dim"] == 2
    assert morl(["eval", str(run_dir), "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "eval/hv:" in out and "eval/return/control_cost" in out


def _crash_and_resume(overrides, tmp_path, monkeypatch):
    """The run uninterrupted, and the same run crashed at step 19 (after the checkpoint of step 16)
    and resumed; asserts their last checkpoints and records equal. Returns both run directories."""
    ticks = {"process_time": itertools.count(), "perf_counter": itertools.count()}
    clock = SimpleNamespace(**{name: functools.partial(next, count) for name, count in ticks.items()})
    monkeypatch.setattr(sac_experiment, "time", clock)  # one second per step, on each clock
    full = start("mo", load_mo_config(QUICK, [*overrides, f"run.out_dir={tmp_path / 'full'}"]), progress=False)
    real = mo_session.collect_action

    def crashing(s):
        if s.step == 19:
            raise RuntimeError("simulated crash")
        return real(s)

    monkeypatch.setattr(mo_session, "collect_action", crashing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        start("mo", load_mo_config(QUICK, [*overrides, f"run.out_dir={tmp_path / 'crashed'}"]), progress=False)
    monkeypatch.setattr(mo_session, "collect_action", real)
    (crashed,) = (tmp_path / "crashed").iterdir()
    assert torch_load(crashed / "checkpoints" / "last.pt")["step"] == 16
    assert morl(["resume", str(crashed), "--no-progress"]) == 0
    a, b = (torch_load(d / "checkpoints" / "last.pt") for d in (full, crashed))
    for key in ("agent", "replay", "env", "eval_env", "rng", "stats"):
        assert_state_equal(a[key], b[key], key)
    strip = [[{k: v for k, v in r.items() if k != "time" and not k.startswith("perf/")} for r in _records(d)]
             for d in (full, crashed)]  # fmt: skip
    assert strip[0] == strip[1]
    for d in (full, crashed):  # the 24 steps, each counted once: not the crashed step, not the evaluations
        assert json.loads((d / "final_metrics.json").read_text())["train_seconds"] == {"cpu": 24, "wall": 24}
    return full, crashed


@pytest.mark.parametrize("assignment", ["fixed", "transport"])
def test_a_crashed_run_resumed_equals_the_uninterrupted_one(assignment, tmp_path, monkeypatch):
    overrides = [*TINY, "run.total_steps=24", "aggregator.name=epo_al", "aggregator.options={}"]
    # transport: updates 0, 3, ..., 15 re-assign (9 to 15 after the resume) the given preferences
    overrides += [f"agent.assignment={assignment}", "agent.assign_every=3", "agent.preferences=[[0.6,0.4],[0.3,0.7]]"]
    full, crashed = _crash_and_resume(overrides, tmp_path, monkeypatch)
    a = torch_load(full / "checkpoints" / "last.pt")
    assert (assignment == "transport") != bool((a["agent"]["assigned_preferences"] == a["agent"]["preferences"]).all())
    assert sorted(_images(crashed)["eval/front"]) == [10, 20, 24]  # the resumed run draws 20 and 24, none twice


def test_a_conditioned_run_draws_its_front_at_the_population_preferences_and_resumes_bitwise(
    tmp_path, monkeypatch, capsys
):
    """``agent.conditioned``: 2 collecting sub-envs, a front of 10 preferences (evaluated by 10 sub-envs
    in one group), per-objective update metrics; a run crashed and resumed equals the uninterrupted one."""
    overrides = [*TINY, "run.total_steps=24", "agent.conditioned=true", "agent.population=10"]
    overrides += ["agent.collect_envs=2", "agent.groups=4", "aggregator.name=upgrad"]
    full, _ = _crash_and_resume(overrides, tmp_path, monkeypatch)
    records = _records(full)
    evals = [r for r in records if r["kind"] == "eval"]
    assert set(evals[-1]["eval/discounted_return/forward_velocity"]) == {f"p{i}" for i in range(10)}
    assert "the preference-conditioned MO-SAC" in capsys.readouterr().out
    train = [r for r in records if r["kind"] == "train"][-1]
    assert isinstance(train["alpha"], float) and isinstance(train["loss/critic/forward_velocity"], float)
    assert set(train["train/episode_return/control_cost"]) == {"p0", "p1"}  # the collecting sub-envs
    assert morl(["eval", str(full), "--episodes", "1"]) == 0
    assert "eval/return/control_cost" in capsys.readouterr().out


def test_a_checkpoint_of_the_older_critic_layout_is_one_line(tmp_path, capsys):
    """Older MO-SAC checkpoints hold P·M scalar twin critics; eval and resume refuse them in one line."""
    from morl.agents.rl.networks import TwinCriticEnsemble
    from morl.runners.checkpoint import atomic_torch_save

    out_dir = tmp_path / "runs"
    assert morl(["train", QUICK, *TINY, "run.total_steps=9", f"run.out_dir={out_dir}", "--no-progress"]) == 0
    (run_dir,) = out_dir.iterdir()
    state = torch_load(run_dir / "checkpoints" / "last.pt")
    older = TwinCriticEnsemble(17, 6, 2 * 2, [8, 8]).state_dict()  # 2 policies x 2 objectives, one output each
    state["agent"].update(critic=older, critic_target=older)
    atomic_torch_save(state, run_dir / "checkpoints" / "last.pt")
    capsys.readouterr()
    for command in (["eval", str(run_dir)], ["resume", str(run_dir), "--no-progress"]):
        assert morl(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("morl: error: checkpoint: "), err
        assert "4 twin critics with 1 output" in err[0] and "expects 2 twin critics with 2 outputs" in err[0]


def test_report_aggregates_the_hypervolume_over_seeds(tmp_path, capsys):
    for seed in (0, 1):
        cfg = load_mo_config(
            QUICK, [*TINY, "run.total_steps=10", f"run.seed={seed}", f"run.out_dir={tmp_path / 'runs'}"]
        )
        start("mo", cfg, progress=False)
    runs = sorted(str(p) for p in (tmp_path / "runs").iterdir())
    finals = [json.loads((tmp_path / "runs" / r / "final_metrics.json").read_text())["eval/hv"] for r in runs]
    capsys.readouterr()
    assert morl(["report", *runs, "--out", str(tmp_path / "report"), "--no-plots", "--reps", "200"]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    (method,) = report["methods"]
    assert report["metric"] == "eval/hv" and method["method"] == "linear" and method["runs"] == 2
    assert method["final"]["mean"]["value"] == pytest.approx(sum(finals) / 2)
    low, high = method["final"]["mean"]["ci"]
    assert low <= method["final"]["mean"]["value"] <= high
    assert morl(["report", *runs, "--out", str(tmp_path / "eum"), "--no-plots", "--metric", "eval/eum"]) == 0
    assert json.loads((tmp_path / "eum" / "report.json").read_text())["metric"] == "eval/eum"


def test_a_sweep_runs_mo_configs_as_mo_runs(tmp_path):
    from morl.runners.sweep.cells import expand
    from morl.runners.sweep.command import check_configs
    from morl.runners.sweep.kinds import kind_of_cell
    from morl.runners.sweep.spec import load_spec
    from tests.runners.sweep.sweeps import write_spec

    spec = write_spec(tmp_path, base=QUICK, grid={"aggregator.name": ["linear", "mgda"]}, seeds=[0, 1])
    cells = expand(load_spec(spec))
    assert {c.command for c in cells} == {"train"} and cells[1].overrides[-1] == "run.seed=1"
    assert {kind_of_cell(c.command, c.config) for c in cells} == {"mo"}
    check_configs(cells)  # loads each as an mo config: a bad value would stop the sweep here


def test_a_run_whose_updates_are_all_skipped_stops_as_diverged(tmp_path, capsys):
    # lr = 1e38: Adam's largest step would overflow float32, so guarded Adam refuses every step
    lrs = ["agent.actor_lr=1e38", "agent.critic_lr=1e38", "agent.alpha_lr=1e38", "run.max_nonfinite_updates=3"]
    with pytest.raises(SystemExit) as stop:
        morl(["train", QUICK, *TINY, *lrs, "run.total_steps=20", f"run.out_dir={tmp_path}", "--no-progress"])
    assert stop.value.code == 3
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("morl: error")]
    assert len(err) == 1 and "training diverged at step 15/20" in err[0] and "agent.actor_lr" in err[0], err
    assert "step_000000008.pt (step 8)" in err[0]  # the last checkpoint before the first (skipped) update
    (run_dir,) = tmp_path.iterdir()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "diverged"


@pytest.mark.integration
def test_the_quickstart_front_improves(tmp_path):
    """The quick config's front rises above the untrained population's (same seed, same
    evaluation env): a larger hypervolume of the discounted returns at some evaluation and a
    larger EUM at the end; measured figures: docs/mosac.md."""
    from morl.runners.mo.front import evaluation_metrics
    from morl.runners.mo.session import build_session

    cfg = load_mo_config(QUICK, [f"run.out_dir={tmp_path}"])
    untrained = evaluation_metrics(build_session(cfg), figure=False)
    run_dir = start("mo", cfg, progress=False)
    evals = [r for r in _records(run_dir) if r["kind"] == "eval"]
    assert max(r["eval/hv"] for r in evals) > untrained["eval/hv"]
    assert evals[-1]["eval/eum"] > untrained["eval/eum"]
