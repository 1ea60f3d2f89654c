"""``morl forum`` on the experiment shell: stop (in-process, during the baselines, SIGTERM) and
resume end bitwise equal to an uninterrupted run, bad input writes nothing, ``morl eval`` reads
a run."""

import json
from pathlib import Path

import pytest

from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from morl.runners.forum.experiment import ForumExperiment
from morl.runners.interrupts import Interrupted
from morl.runners.shell.commands import resume, start
from tests.runners.shell_resume_checks import (
    assert_same_run,
    final_metrics,
    morl_resume,
    sigterm_after_first_record,
    status,
)

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
HYPER = str(CONFIGS / "forum_hypercleaning_digits.yaml")
MTL = str(CONFIGS / "forum_mtl_digits.yaml")
# Mini-batches (hyper-cleaning batch_size 64, MTL's random batches) draw from the problem's own
# generator: a resume that loses it, or the momentum λ̃ or Adam's moments, diverges at once.
TINY = {
    HYPER: ["forum.inner_steps=2", "hypercleaning.hidden=[16]", "hypercleaning.batch_size=64"],
    MTL: ["forum.inner_steps=2", "mtl.hidden=[16]"],
}
SHORT = ["iterations=6", "eval_every=2", "checkpoint_every=4"]


def _cfg(config, *overrides):
    return ForumExperiment.load_config(config, [*TINY[config], *overrides])


@pytest.mark.parametrize("config", [HYPER, MTL])
def test_stop_in_process_then_resume_equals_the_uninterrupted_run(config, tmp_path):
    cfg = _cfg(config, *SHORT)
    start("forum", cfg, run_dir=tmp_path / "full", progress=False)
    # iteration 3: after the evaluation at 2, before the checkpoint at 4 (the stop writes its own)
    with pytest.raises(Interrupted, match="at iteration 3/6.*morl resume"):
        start("forum", cfg, run_dir=tmp_path / "cut", stop_at=3, progress=False)
    assert torch_load(tmp_path / "cut" / "checkpoints" / "last.pt")["iteration"] == 3
    assert not (tmp_path / "cut" / "final_metrics.json").exists()
    resume(tmp_path / "cut", progress=False)
    assert_same_run(tmp_path / "full", tmp_path / "cut")
    assert len(final_metrics(tmp_path / "full")) >= 2  # FORUM and its baselines


def test_a_stop_during_the_baselines_resumes_into_them(tmp_path, monkeypatch):
    from morl.runners.forum.hypercleaning import HyperCleaningProblem

    cfg = _cfg(HYPER, *SHORT)
    start("forum", cfg, run_dir=tmp_path / "full", progress=False)
    real = HyperCleaningProblem.baselines

    def interrupted(self):
        raise KeyboardInterrupt  # Ctrl-C while the baselines train

    monkeypatch.setattr(HyperCleaningProblem, "baselines", interrupted)
    with pytest.raises(KeyboardInterrupt):
        start("forum", cfg, run_dir=tmp_path / "cut", progress=False)
    monkeypatch.setattr(HyperCleaningProblem, "baselines", real)
    cut = tmp_path / "cut"
    assert torch_load(cut / "checkpoints" / "last.pt")["iteration"] == 6 and not (cut / "final_metrics.json").exists()
    resume(cut, progress=False)
    assert_same_run(tmp_path / "full", cut)
    assert set(final_metrics(cut)) == {"forum", "plain_noisy", "plain_noisy_plus_val1"}


@pytest.mark.integration  # a subprocess stopped by SIGTERM
def test_sigterm_then_morl_resume_equals_the_uninterrupted_run(tmp_path):
    argv = ["iterations=40", "eval_every=2", "checkpoint_every=100"]
    start("forum", _cfg(HYPER, *argv), run_dir=tmp_path / "full", progress=False)
    cut = tmp_path / "cut"
    sigterm_after_first_record(["forum", HYPER, *TINY[HYPER], *argv], cut)
    assert 2 <= torch_load(cut / "checkpoints" / "last.pt")["iteration"] < 40
    morl_resume(cut)
    assert_same_run(tmp_path / "full", cut)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("morl: error: "), err
    return err[0]


@pytest.mark.parametrize(
    "override, words",
    [
        ("forum.rhoo=1", ["unknown config key 'forum.rhoo'", "rho"]),
        ("iterations=0", ["iterations must be >= 1, got 0"]),
        ("hypercleaning.datasets=7", ["hypercleaning.datasets must be between 1 and 4, got 7"]),
        ("checkpoint_every=0", ["checkpoint_every must be >= 1"]),
        ("problem=rl", ["problem", "hypercleaning", "mtl"]),
    ],
)
def test_bad_input_one_line_nothing_written(override, words, tmp_path, capsys):
    assert morl(["forum", HYPER, override, "--run-dir", str(tmp_path / "run")]) == 2
    line = _one_error_line(capsys)
    assert all(w in line for w in words), line
    assert not (tmp_path / "run").exists()


def test_resume_refuses_a_learner_key_and_eval_reads_the_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert morl(["forum", MTL, *TINY[MTL], *SHORT, "--run-dir", str(run), "--no-progress"]) == 0
    capsys.readouterr()
    before = (run / "config.yaml").read_text(), (run / "checkpoints" / "last.pt").read_bytes()
    assert morl(["resume", str(run), "forum.rho=0.9"]) == 2
    line = _one_error_line(capsys)
    assert "forum.rho" in line and "iterations" in line and "checkpoint_minutes" in line
    assert ((run / "config.yaml").read_text(), (run / "checkpoints" / "last.pt").read_bytes()) == before

    assert morl(["eval", str(run)]) == 0
    out = capsys.readouterr().out
    assert "digit/accuracy" in out and "headline" in out
    result = json.loads((run / "eval" / "iteration_000000006.json").read_text())
    assert result["kind"] == "forum" and result["iteration"] == 6
    forum = json.loads((run / "final_metrics.json").read_text())["forum"]
    # the headline is FORUM's mean test accuracy in %, as final_metrics.json reports it
    accuracies = [forum[f"{t}/accuracy"] for t in ("digit", "parity", "large")]
    assert result["headline"] == pytest.approx(sum(accuracies) / 3, abs=1e-9)

    assert morl(["resume", str(run), "iterations=8"]) == 0  # a finished run continues when lengthened
    assert torch_load(run / "checkpoints" / "last.pt")["iteration"] == 8
    assert status(run) == "finished"


def test_a_non_finite_direction_stops_with_exit_3_and_names_the_last_good_checkpoint(tmp_path, capsys):
    # omega_lr=1e30: the first step throws the model's weights to ±1e30 or beyond, and the
    # second iteration's gradients are no longer finite; no step is taken with them (iteration 2 for
    # seeds 0-3 alike).
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        morl(
            [
                "forum",
                HYPER,
                *TINY[HYPER],
                "hypercleaning.omega_lr=1e30",
                "iterations=20",
                "checkpoint_every=1",
                "--run-dir",
                str(run),
                "--no-progress",
            ]
        )
    assert stop.value.code == 3
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("morl: error:")]
    assert "diverged at iteration 2/20" in line and "not finite" in line and "hypercleaning.omega_lr" in line
    assert f"last good checkpoint {run / 'checkpoints' / 'last.pt'} (iteration 1)" in line
    assert status(run) == "diverged" and torch_load(run / "checkpoints" / "last.pt")["iteration"] == 1
