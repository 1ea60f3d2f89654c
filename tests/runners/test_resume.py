"""Checkpoint/resume: an interrupted run resumed from its last checkpoint ends bitwise equal to an
uninterrupted one (CPU, fast env), and ``morl resume`` finishes a run killed with SIGKILL."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import morl.runners.rl.iteration as rl_loop
from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from morl.runners.rl.config import load_rl_config
from morl.runners.shell.commands import resume as _resume
from morl.runners.shell.commands import start
from tests.state_equality import assert_state_equal

ROOT = Path(__file__).resolve().parents[2]
QUICK = str(ROOT / "configs" / "quickstart_point_mass.yaml")
TINY = [
    "agent.hidden_sizes=[32,32]",
    "agent.batch_size=64",
    "agent.buffer_capacity=4000",
    "run.device=cpu",
    "run.warmup_steps=10",
    "run.log_every=7",
    "run.eval_every=25",
    "run.checkpoint_every=20",
    "run.eval_episodes=1",
]


def start_run(cfg, progress=False):
    return start("rl", cfg, progress=progress)


def resume_run(run_dir, overrides=(), progress=False):
    return _resume(run_dir, overrides, progress=progress)


def _final_state(run_dir: Path) -> dict:
    return torch_load(run_dir / "checkpoints" / "last.pt")


@pytest.mark.parametrize("aggregator", ["moco"])
def test_interrupted_and_resumed_run_equals_the_uninterrupted_one(aggregator, tmp_path, monkeypatch):
    # MoCo: its tracking state (Y, lambda, step counter) must survive the checkpoint too.
    overrides = [*TINY, "run.total_steps=50", f"aggregator.name={aggregator}", "aggregator.options={}"]
    full = start_run(load_rl_config(QUICK, [*overrides, f"run.out_dir={tmp_path / 'full'}"]), progress=False)

    # Same run, crashing at step 33: the last checkpoint is step 20, mid-way between log,
    # evaluation and checkpoint points.
    real_collect = rl_loop.collect_action

    def crashing_collect(s):
        if s.step == 33:
            raise RuntimeError("simulated crash")
        return real_collect(s)

    monkeypatch.setattr(rl_loop, "collect_action", crashing_collect)
    with pytest.raises(RuntimeError, match="simulated crash"):
        start_run(load_rl_config(QUICK, [*overrides, f"run.out_dir={tmp_path / 'crashed'}"]), progress=False)
    monkeypatch.setattr(rl_loop, "collect_action", real_collect)
    (crashed,) = (tmp_path / "crashed").iterdir()
    assert _final_state(crashed)["step"] == 20

    resume_run(crashed, progress=False)
    a, b = _final_state(full), _final_state(crashed)
    assert a["step"] == b["step"] == 50 and a["updates"] == b["updates"] == 40
    for key in ("agent", "replay", "env", "eval_env", "rng"):
        assert_state_equal(a[key], b[key], key)
    assert a["stats"]["last_eval"] == b["stats"]["last_eval"]  # the evaluation env resumed exactly too
    # the resumed run's metrics continue the same record: one line per log/eval point, no repeats
    steps = [(x["kind"], x["step"]) for x in map(json.loads, (crashed / "metrics.jsonl").read_text().splitlines())]
    assert len(steps) == len(set(steps))
    assert steps == [(x["kind"], x["step"]) for x in map(json.loads, (full / "metrics.jsonl").read_text().splitlines())]


def test_resume_rejects_overrides_that_change_the_learner(tmp_path, capsys):
    run_dir = start_run(load_rl_config(QUICK, [*TINY, "run.total_steps=20", f"run.out_dir={tmp_path}"]), progress=False)
    capsys.readouterr()
    assert morl(["resume", str(run_dir), "agent.batch_size=128"]) == 2
    err = capsys.readouterr().err
    assert "agent.batch_size" in err and "run.total_steps" in err
    assert morl(["resume", str(run_dir)]) == 0
    assert "already finished" in capsys.readouterr().out
    assert morl(["resume", str(run_dir), "run.total_steps=30"]) == 0
    assert _final_state(run_dir)["step"] == 30


@pytest.mark.integration  # a subprocess killed with SIGKILL
def test_sigkill_then_morl_resume_finishes(tmp_path):
    out_dir = tmp_path / "runs"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "morl.runners.cli",
        "train",
        QUICK,
        *TINY,
        "run.checkpoint_every=10",
        "run.total_steps=100000",
        f"run.out_dir={out_dir}",
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 240
        while not list(out_dir.glob("*/checkpoints/last.pt")):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.time() < deadline, "no checkpoint within 240 s"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    (run_dir,) = out_dir.iterdir()
    step = _final_state(run_dir)["step"]
    assert step >= 10 and step % 10 == 0

    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "morl.runners.cli",
            "resume",
            str(run_dir),
            f"run.total_steps={step + 15}",
            "--no-progress",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {run_dir} at step {step}" in resumed.stdout
    assert _final_state(run_dir)["step"] == step + 15


def test_ctrl_c_writes_a_checkpoint_and_resume_equals_the_uninterrupted_run(tmp_path, monkeypatch):
    # Checkpoints are due only at the end, so the one the resume starts from is the interrupt's own.
    overrides = [
        *TINY,
        "run.total_steps=50",
        "run.checkpoint_every=1000",
        "aggregator.name=pcgrad",
        "aggregator.options={}",
    ]
    full = start_run(load_rl_config(QUICK, [*overrides, f"run.out_dir={tmp_path / 'full'}"]), progress=False)

    real_collect = rl_loop.collect_action

    def interrupting_collect(s):
        if s.step == 33:  # Ctrl-C in the middle of a step: the step finishes first
            os.kill(os.getpid(), signal.SIGINT)
        return real_collect(s)

    monkeypatch.setattr(rl_loop, "collect_action", interrupting_collect)
    # whatever the test process had: Python's default, or SIG_IGN under `nohup cmd &`
    handler_before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match="at step 34/50.*morl resume"):
        start_run(load_rl_config(QUICK, [*overrides, f"run.out_dir={tmp_path / 'stopped'}"]), progress=False)
    monkeypatch.setattr(rl_loop, "collect_action", real_collect)
    assert signal.getsignal(signal.SIGINT) is handler_before  # handler restored
    (stopped,) = (tmp_path / "stopped").iterdir()
    assert _final_state(stopped)["step"] == 34

    resume_run(stopped, progress=False)
    a, b = _final_state(full), _final_state(stopped)
    assert a["step"] == b["step"] == 50
    for key in ("agent", "replay", "env", "eval_env", "rng"):
        assert_state_equal(a[key], b[key], key)


@pytest.mark.integration  # a subprocess stopped by SIGTERM
def test_sigterm_to_morl_train_checkpoints_and_exits_130(tmp_path):
    out_dir = tmp_path / "runs"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "morl.runners.cli",
        "train",
        QUICK,
        *TINY,
        "run.checkpoint_every=100000",
        "run.log_every=5",
        "run.total_steps=100000",
        f"run.out_dir={out_dir}",
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        while not list(out_dir.glob("*/metrics.jsonl")) or not (next(out_dir.glob("*/metrics.jsonl")).stat().st_size):
            assert proc.poll() is None, proc.stderr.read()
            assert time.time() < deadline, "no metrics within 240 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "checkpoint" in err and "morl resume" in err
    (run_dir,) = out_dir.iterdir()
    assert _final_state(run_dir)["step"] > 0  # written on the way out: no periodic checkpoint was due
