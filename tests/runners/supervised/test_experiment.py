"""``morl supervised`` on the experiment shell: stop (in-process and SIGTERM) and resume end
bitwise equal to an uninterrupted run, bad input writes nothing, ``morl eval`` reads a run."""

import json
from pathlib import Path

import pytest

from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from morl.runners.interrupts import Interrupted
from morl.runners.shell.commands import resume, start
from morl.runners.supervised.experiment import SupervisedExperiment
from tests.runners.shell_resume_checks import assert_same_run, morl_resume, sigterm_after_first_record, status

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
JOGBA = str(CONFIGS / "supervised_digits_jogba.yaml")
# JoGBa orders (their generator and the gradients they observe) and PCGrad's random projection
# order both carry state across epochs: a resume that loses either diverges at once.
TINY = ["model.hidden=[16]", "batch_size=128", "aggregator.name=pcgrad", "eval_every=2", "checkpoint_every=4"]


def _cfg(*overrides):
    return SupervisedExperiment.load_config(JOGBA, [*TINY, *overrides])


def test_stop_in_process_then_resume_equals_the_uninterrupted_run(tmp_path):
    cfg = _cfg("epochs=6")
    start("supervised", cfg, run_dir=tmp_path / "full", progress=False)
    # epoch 3: after the evaluation at 2, before the checkpoint at 4 (the stop writes its own)
    with pytest.raises(Interrupted, match="at epoch 3/6.*morl resume"):
        start("supervised", cfg, run_dir=tmp_path / "cut", stop_at=3, progress=False)
    assert torch_load(tmp_path / "cut" / "checkpoints" / "last.pt")["epoch"] == 3
    assert status(tmp_path / "cut") == "interrupted"
    resume(tmp_path / "cut", progress=False)
    assert_same_run(tmp_path / "full", tmp_path / "cut")
    lines = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [(x["kind"], x["step"]) for x in lines] == [
        ("train", 1),
        ("train", 2),
        ("eval", 2),
        ("train", 3),
        ("train", 4),
        ("eval", 4),
        ("train", 5),
        ("train", 6),
        ("eval", 6),
    ]


@pytest.mark.integration  # a subprocess stopped by SIGTERM
def test_sigterm_then_morl_resume_equals_the_uninterrupted_run(tmp_path):
    # batch 16: about 70 steps per epoch, so the signal lands long before epoch 12
    argv = [*TINY, "batch_size=16", "epochs=12", "checkpoint_every=100"]
    start("supervised", _cfg(*argv), run_dir=tmp_path / "full", progress=False)
    cut = tmp_path / "cut"
    sigterm_after_first_record(["supervised", JOGBA, *argv], cut)
    assert 1 <= torch_load(cut / "checkpoints" / "last.pt")["epoch"] < 12
    morl_resume(cut)
    assert_same_run(tmp_path / "full", cut)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("morl: error: "), err
    return err[0]


@pytest.mark.parametrize(
    "override, words",
    [
        ("epoch=3", ["unknown config key 'epoch'", "epochs"]),
        ("epochs=0", ["epochs must be >= 1, got 0"]),
        ("checkpoint_minutes=0", ["checkpoint_minutes must be > 0 or null"]),
        ("model.hidden=[]", ["model.hidden"]),
    ],
)
def test_bad_input_one_line_nothing_written(override, words, tmp_path, capsys):
    assert morl(["supervised", JOGBA, override, "--run-dir", str(tmp_path / "run")]) == 2
    line = _one_error_line(capsys)
    assert all(w in line for w in words), line
    assert not (tmp_path / "run").exists()


def test_resume_refuses_a_learner_key_and_eval_reads_the_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert morl(["supervised", JOGBA, *TINY, "epochs=3", "--run-dir", str(run), "--no-progress"]) == 0
    capsys.readouterr()
    before = (run / "config.yaml").read_text(), (run / "checkpoints" / "last.pt").read_bytes()
    assert morl(["resume", str(run), "aggregator.name=mgda"]) == 2
    line = _one_error_line(capsys)
    assert "aggregator.name" in line and "epochs" in line and "checkpoint_every" in line
    assert morl(["supervised", "--resume", str(run), "optim.lr=0.1"]) == 2
    assert "optim.lr" in _one_error_line(capsys)
    assert ((run / "config.yaml").read_text(), (run / "checkpoints" / "last.pt").read_bytes()) == before

    assert morl(["eval", str(run)]) == 0
    out = capsys.readouterr().out
    assert "digit/accuracy" in out and "headline" in out
    result = json.loads((run / "eval" / "epoch_000000003.json").read_text())
    assert result["kind"] == "supervised" and result["epoch"] == 3
    final = json.loads((run / "final_metrics.json").read_text())
    # the checkpoint is the final model: eval gives final_metrics.json's numbers again
    assert result["test"] == final["test"] and result["headline"] == final["headline"]
    # headline: the mean of the three tasks' test accuracies
    assert result["headline"] == pytest.approx(sum(final["test"][k] for k in final["directions"]) / 3, abs=1e-12)

    assert morl(["resume", str(run), "epochs=4"]) == 0  # a finished run continues when lengthened
    assert torch_load(run / "checkpoints" / "last.pt")["epoch"] == 4
