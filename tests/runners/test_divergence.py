"""Divergence is never silent: skipped updates are reported, too many in a row stop the run with
one line (step, last good checkpoint, what to try) and exit status 3, NaN actions never reach
the environment, and a skipped update leaves parameters and optimizer state exactly as they were.

The RL runs use the fast point-mass env with the tiny networks of tests/runners/test_train.py:
warm-up 20 steps, so the first update happens at step 21, and log + checkpoint points every 20
steps. The expected stop steps below follow from that schedule by hand.

A run that goes non-finite ends as status "diverged" in run.json, exit status 3 and one line on
stderr naming the position and what to try; its last checkpoint stays the last finite one, and a
run whose every update was skipped is diverged too (it never trained).

The shell's rules, on a walk x_t = t whose "model" (x) or evaluation turns NaN at a chosen step,
are checked with the loop (tests/runners/shell/test_loop.py); here each kind of run is driven to a
real divergence by a learning rate that overflows float32 (every step moves parameters by about lr).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from tests.runners.shell_resume_checks import error_line, status

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
QUICK = str(CONFIGS / "quickstart_point_mass.yaml")
DIGITS = str(CONFIGS / "supervised_digits_mean.yaml")
TINY = [
    "agent.batch_size=64",
    "agent.buffer_capacity=4000",
    "run.device=cpu",
    "run.warmup_steps=20",
    "run.log_every=20",
    "run.eval_every=100",
    "run.checkpoint_every=20",
    "run.eval_episodes=1",
    "aggregator.name=pcgrad",
    "aggregator.options={}",
]


def _diverged_line(err: str) -> str:
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("morl: error:")]
    assert len(lines) == 1, err
    assert lines[0].startswith("morl: error: training diverged at "), lines[0]
    return lines[0]


def _all_finite(state) -> bool:
    if isinstance(state, torch.Tensor):
        return not state.is_floating_point() or bool(torch.isfinite(state).all())
    if isinstance(state, dict):
        return all(_all_finite(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return all(_all_finite(v) for v in state)
    return True


def _networks(ckpt: dict) -> dict:
    agent = ckpt["agent"]
    return {
        k: agent[k] for k in ("actor", "critic", "critic_target", "log_alpha", "actor_opt", "critic_opt", "alpha_opt")
    }


def test_huge_critic_lr_stops_with_one_line_naming_step_and_checkpoint(tmp_path, capsys):
    # critic_lr=1e30: the first critic step makes Q ~ 1e30, every later TD error overflows, so
    # from update 2 on (step 22) every update is skipped. 30 in a row are reached by step 51;
    # the counters are read every 20 steps, so the run stops at step 60. The last update taken
    # ahead of the streak is update 1 (step 21): the good snapshot is step 20's.
    out_dir = tmp_path / "runs"
    with pytest.raises(SystemExit) as stop:
        morl(
            [
                "train",
                QUICK,
                *TINY,
                "agent.hidden_sizes=[32,32]",
                "agent.critic_lr=1e30",
                "run.total_steps=200",
                "run.max_nonfinite_updates=30",
                f"run.out_dir={out_dir}",
                "--no-progress",
            ]
        )
    assert stop.value.code == 3
    err = capsys.readouterr().err
    line = _diverged_line(err)
    (run_dir,) = out_dir.iterdir()
    snapshot = run_dir / "checkpoints" / "step_000000020.pt"
    assert "at step 60/200" in line and f"{snapshot} (step 20)" in line and "agent.critic_lr" in line
    assert "run.max_nonfinite_updates=30" in line
    assert "step 40: warning: " in err and "of the last 20 updates were non-finite" in err  # reported before the stop
    # no checkpoint at the stop: the newest snapshot is step 40's, last.pt was written with it
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*.pt")) == [
        "step_000000020.pt",
        "step_000000040.pt",
    ]
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["step"] == 40
    assert _all_finite(_networks(torch.load(snapshot, weights_only=False)))
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert train[-1]["step"] == 60 and train[-1]["train/skipped_nonfinite_updates"] >= 39  # of 40 updates
    assert train[-1]["train/nonfinite_streak"] >= 39


ACTOR_LR_RUN = [QUICK, *TINY, "agent.hidden_sizes=[64,64]", "agent.actor_lr=1e30", "run.total_steps=200"]


def _check_actor_lr_run(out_dir: Path, err: str) -> None:
    # actor_lr=1e30: Adam's first step (step 21) moves every actor weight by exactly ±1e30
    # (m/sqrt(v) = ±1 at step 1); the next forward pass overflows to inf - inf = NaN, so the
    # actions of step 22 are NaN. The env's own NaN check (a traceback) must never be reached.
    line = _diverged_line(err)
    (run_dir,) = out_dir.iterdir()
    snapshot = run_dir / "checkpoints" / "step_000000020.pt"
    assert "at step 22/200" in line and "the policy's actions are NaN/inf" in line
    assert f"{snapshot} (step 20)" in line and "agent.actor_lr" in line
    assert _all_finite(_networks(torch.load(snapshot, weights_only=False)))
    assert _all_finite(_networks(torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)))


def test_huge_actor_lr_stops_before_nan_actions_reach_the_env(tmp_path, capsys):
    out_dir = tmp_path / "runs"
    with pytest.raises(SystemExit) as stop:
        morl(["train", *ACTOR_LR_RUN, f"run.out_dir={out_dir}", "--no-progress"])
    assert stop.value.code == 3
    _check_actor_lr_run(out_dir, capsys.readouterr().err)


@pytest.mark.integration  # a subprocess
def test_huge_actor_lr_through_the_real_command_line(tmp_path):
    # The same run as a user starts it (16 s, mostly imports): exit status 3, no traceback.
    out_dir = tmp_path / "runs"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "morl.runners.cli", "train", *ACTOR_LR_RUN, f"run.out_dir={out_dir}", "--no-progress"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stdout
    _check_actor_lr_run(out_dir, proc.stderr)


def test_isolated_nonfinite_updates_are_skipped_reported_and_the_run_goes_on(tmp_path, capsys, monkeypatch):
    # NaN critic losses injected on updates 3 and 11 (steps 24 and 32): both are skipped, the run
    # finishes normally, the terminal reports 2 skipped updates in the interval ending at step 40.
    from morl.agents.rl.mtsac import MTSAC

    calls = {"n": 0}
    original = MTSAC._critic_losses

    def poisoned(self, *args):
        losses = original(self, *args)
        calls["n"] += 1
        return losses * float("nan") if calls["n"] in (4, 12) else losses

    monkeypatch.setattr(MTSAC, "_critic_losses", poisoned)
    out_dir = tmp_path / "runs"
    assert (
        morl(
            [
                "train",
                QUICK,
                *TINY,
                "agent.hidden_sizes=[32,32]",
                "run.total_steps=60",
                "run.max_nonfinite_updates=2",
                f"run.out_dir={out_dir}",
                "--no-progress",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err and "morl: error" not in err
    assert "step 40: warning: 2 of the last 20 updates were non-finite (NaN/inf) and skipped (2 in all)" in err
    assert "step 60: warning" not in err  # nothing new to report
    (run_dir,) = out_dir.iterdir()
    train = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"train"' in x]
    assert [(r["step"], r["train/skipped_nonfinite_updates"]) for r in train[1:]] == [(40, 2.0), (60, 2.0)]
    ckpt = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert ckpt["updates"] == 40 and int(ckpt["agent"]["nonfinite_updates"]) == 2
    assert int(ckpt["agent"]["nonfinite_longest"]) == 1  # isolated: never two in a row
    assert _all_finite(_networks(ckpt))
    # the skipped updates did not count as Adam steps: 40 updates, 38 taken by the critic optimizer
    steps = {int(s["step"]) for s in ckpt["agent"]["critic_opt"]["state"].values()}
    assert steps == {38}


def test_supervised_huge_lr_stops_with_one_line(tmp_path, capsys):
    # lr=1e30: after Adam's first step (weights ±1e30) every step overflows and is skipped. An
    # epoch of the digits split has 34 steps < 40; at epoch 1's log point the latest step was
    # skipped and the model's validation loss is NaN: the run stops before any checkpoint.
    out_dir = tmp_path / "runs"
    with pytest.raises(SystemExit) as stop:
        morl(
            [
                "supervised",
                DIGITS,
                "optim.lr=1e30",
                "epochs=5",
                "checkpoint_every=1",
                "eval_every=1",
                "max_nonfinite_updates=40",
                f"out_dir={out_dir}",
            ]
        )
    assert stop.value.code == 3
    captured = capsys.readouterr()
    line = _diverged_line(captured.err)
    (run_dir,) = out_dir.iterdir()
    assert "at epoch 1/5" in line and "last 33 updates were skipped" in line and "optim.lr" in line
    assert "no checkpoint was written before it" in line and not (run_dir / "checkpoints" / "last.pt").exists()
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # the stop comes at epoch 1's log point, after its train record and before its evaluation
    train = [(r["step"], r["train/skipped_nonfinite_updates"]) for r in records if r["kind"] == "train"]
    assert train == [(1, 33)] and [r["step"] for r in records if r["kind"] == "eval"] == []


# -- the supervised adapter's guard (MT-SAC's: tests/agents/rl/test_guarded_adam.py) --------------------


@pytest.mark.parametrize("optim", ["adam", "sgd"])
def test_supervised_adapter_undoes_a_nonfinite_step(optim):
    from morl.agents.supervised.multitask import MultiHeadMLP, MultiTaskLoss, SupervisedMTL, TaskSpec
    from morl.aggregators import build

    specs = [TaskSpec("a", "regression"), TaskSpec("b", "regression")]
    torch.manual_seed(0)
    model = MultiHeadMLP(3, [4], specs)
    opt = (
        torch.optim.Adam(model.parameters(), lr=1e-2)
        if optim == "adam"
        else torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    )
    adapter = SupervisedMTL(
        model, build("mean", check_finite="skip"), opt, shared="trunk", loss_fn=MultiTaskLoss(specs)
    )
    x, y = torch.randn(8, 3), torch.randn(8, 2)
    adapter.step((x, y))
    params = [q.detach().clone() for q in model.parameters()]
    state = {id(q): {k: v.clone() for k, v in opt.state[q].items() if torch.is_tensor(v)} for q in model.parameters()}
    bad = y.clone()
    bad[2, 1] = float("nan")
    adapter.step((x, bad))
    assert all(torch.equal(a, b.detach()) for a, b in zip(params, model.parameters()))
    assert all(torch.equal(opt.state[q][k], v) for q in model.parameters() for k, v in state[id(q)].items())
    adapter.step((x, y))
    adapter.step((x, bad))
    assert [int(adapter.nonfinite_steps), int(adapter.nonfinite_streak), int(adapter.nonfinite_longest)] == [2, 1, 1]
    assert not all(torch.equal(a, b.detach()) for a, b in zip(params, model.parameters()))  # a clean step trains


# -- each kind of run ---------------------------------------------------------------------------


def _morl_diverges(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        morl([*argv, "--no-progress"])
    assert stop.value.code == 3
    return error_line(capsys)


def _finite(state) -> bool:
    from morl.runners.divergence import first_nonfinite

    return first_nonfinite(state) is None


def _none_written(last: Path) -> bool:
    return not last.exists()


def _finite_if_written(last: Path) -> bool:
    return not last.exists() or _finite(torch_load(last))


# (argv without --run-dir, how the line starts, what else it names, what holds of checkpoints/last.pt)
KIND_RUNS = [
    # lr=1e30: Adam's first step sets weights to about ±1e30; every later forward overflows, so
    # steps 2-34 of epoch 1 are skipped (33 < max_nonfinite_updates). The accuracy headline stays
    # finite (argmax of NaN logits), the validation loss does not: the run stops at epoch 1.
    pytest.param(
        ["supervised", DIGITS, "optim.lr=1e30", "epochs=3", "eval_every=1", "checkpoint_every=1"],
        "morl: error: training diverged at epoch 1/3: the model outputs NaN/inf (validation digit/loss=nan) "
        "and its last 33 updates were skipped; no checkpoint was written before it; ",
        ["optim.lr", "max_grad_norm"],
        _none_written,
        id="supervised",
    ),
    # lr=inf: the guarded Adam step can never be taken, so every update is skipped; 40 updates stay
    # under max_nonfinite_updates=100, so only the end of the run can tell
    pytest.param(
        [
            "train",
            QUICK,
            "agent.batch_size=32",
            "agent.buffer_capacity=200",
            "run.device=cpu",
            "run.warmup_steps=20",
            "run.log_every=20",
            "run.eval_every=60",
            "run.checkpoint_every=20",
            "run.eval_episodes=1",
            "agent.hidden_sizes=[16]",
            "run.total_steps=60",
            "agent.actor_lr=inf",
            "agent.critic_lr=inf",
            "agent.alpha_lr=inf",
        ],
        "morl: error: training diverged at step 60/60: every one of the 40 updates was non-finite (NaN/inf) and skipped",
        ["agent.critic_lr"],
        lambda last: torch_load(last)["step"] == 40,
        id="rl",
    ),
    # lr=1e30: round 1's local steps blow the models up; round 2's transport of their NaN losses fails
    pytest.param(
        [
            "fl",
            str(CONFIGS / "fl_most_official.yaml"),
            "device=cpu",
            "data.num_clients=8",
            "strategy.num_models=3",
            "train.local_steps=3",
            "strategy.most.warmup_rounds=1",
            "train.rounds=4",
            "train.eval_every=4",
            "train.checkpoint_every=1",
            "train.lr=1e30",
        ],
        "morl: error: training diverged at round ",
        ["train.lr"],
        _finite_if_written,
        id="fl",
    ),
    # forum and prompt runs stopped this way before the shell's rules too (their fast-tier checks live
    # with their shells' tests); here end to end, each with its own learning rate named
    pytest.param(
        [
            "forum",
            str(CONFIGS / "forum_mtl_digits.yaml"),
            "forum.inner_steps=2",
            "mtl.hidden=[16]",
            "iterations=4",
            "eval_every=2",
            "mtl.lr=1e30",
        ],
        "morl: error: training diverged at iteration 2/4: ",
        ["mtl.lr"],
        _none_written,
        id="forum",
        marks=pytest.mark.integration,
    ),
    pytest.param(
        [
            "prompt",
            str(CONFIGS / "prompt_most.yaml"),
            "encoder=tiny",
            "threads=1",
            "batch_size=16",
            "max_length=16",
            "data.options={train: 48, val: 16, test: 16}",
            "dispatcher.steps=10",
            "steps=4",
            "optim.lr=1e30",
        ],
        "morl: error: training diverged at step 2/4: non-finite training loss",
        ["optim.lr"],
        _none_written,
        id="prompt",
        marks=pytest.mark.integration,
    ),
]


@pytest.mark.parametrize("argv, start, names, last_checkpoint", KIND_RUNS)
def test_each_kind_of_run_ends_diverged(argv, start, names, last_checkpoint, tmp_path, capsys):
    run_dir = tmp_path / "run"
    line = _morl_diverges([*argv, "--run-dir", str(run_dir)], capsys)
    assert line.startswith(start), line
    for name in names:
        assert name in line, line
    assert status(run_dir) == "diverged"
    assert last_checkpoint(run_dir / "checkpoints" / "last.pt")
