"""``morl prompt`` on the experiment shell: a run stopped (in process, by SIGTERM, or by a crash)
and resumed ends bitwise equal to the uninterrupted run (prompts, heads, Adam, MosT's plan and
curriculum, generator, RNGs, dispatcher, metrics); bad input gives one line and exit 2; a finished
run extends like a longer run; ``morl eval`` routes with the stored dispatcher."""

import json
from pathlib import Path

import pytest

from morl.agents.prompts.trainer import MixtureTrainer
from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from morl.runners.interrupts import Interrupted
from morl.runners.prompt.experiment import PromptExperiment
from morl.runners.shell.commands import resume, start
from tests.runners.shell_resume_checks import morl_resume, sigterm_after_first_record
from tests.state_equality import assert_state_equal

CONFIG = str(Path(__file__).resolve().parents[3] / "configs" / "prompt_most.yaml")
# The paper curriculum makes MosT carry state across steps (its s decays every step).
TINY = [
    "encoder=tiny",
    "threads=1",
    "batch_size=16",
    "max_length=16",
    "data.options={train: 48, val: 16, test: 16}",
    "dispatcher.steps=10",
    "most.curriculum=paper",
    "most.curriculum_decay=0.8",
]
ARGS = [*TINY, "steps=7", "log_every=2", "eval_every=2", "checkpoint_every=3"]


def _state(run_dir: Path) -> dict:
    state = torch_load(run_dir / "checkpoints" / "last.pt")
    return {k: v for k, v in state.items() if k != "seconds"}  # wall-clock


def _records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "time" and not k.startswith("perf/")} for line in lines]


def _final(run_dir: Path) -> dict:
    final = json.loads((run_dir / "final_metrics.json").read_text())
    final.pop("seconds")  # wall-clock
    return final


def _assert_same_run(a: Path, b: Path, steps: int) -> None:
    sa, sb = _state(a), _state(b)
    assert sa["step"] == sb["step"] == sa["position"] == steps and "dispatcher" in sa
    assert_state_equal(sa, sb, "last.pt")
    assert _records(a) == _records(b)
    assert _final(a) == _final(b)
    assert json.loads((b / "run.json").read_text())["status"] == "finished"


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """The uninterrupted 7-step run."""
    return start(
        "prompt",
        PromptExperiment.load_config(CONFIG, ARGS),
        run_dir=tmp_path_factory.mktemp("p") / "full",
        progress=False,
    )


def test_stopped_and_resumed_in_process_equals_the_uninterrupted_run(full, tmp_path):
    # Step 5: no log, evaluation (every 2) or periodic checkpoint (every 3) is due there; the
    # interval's loss sums go into the checkpoint, so step 6's record still averages steps 5-6.
    with pytest.raises(Interrupted, match="morl resume"):
        start(
            "prompt",
            PromptExperiment.load_config(CONFIG, ARGS),
            run_dir=tmp_path / "stopped",
            progress=False,
            stop_at=5,
        )
    stopped = tmp_path / "stopped"
    assert torch_load(stopped / "checkpoints" / "last.pt")["step"] == 5
    assert json.loads((stopped / "run.json").read_text())["status"] == "interrupted"
    resume(stopped, progress=False)
    _assert_same_run(full, stopped, 7)
    assert _state(full)["most"]["curriculum"]["s"] == pytest.approx(0.8**7)
    assert [(r["kind"], r["step"]) for r in _records(full)] == [(k, s) for s in (2, 4, 6, 7) for k in ("train", "eval")]


def test_crashed_run_resumes_from_its_last_checkpoint(full, tmp_path, monkeypatch, capsys):
    orig, calls = MixtureTrainer.step, []

    def crash_in_step_6(self, *a):  # the last checkpoint is step 3; step 4's records are already written
        calls.append(1)
        if len(calls) == 6:
            raise RuntimeError("simulated crash")
        return orig(self, *a)

    monkeypatch.setattr(MixtureTrainer, "step", crash_in_step_6)
    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError, match="simulated crash"):
        start("prompt", PromptExperiment.load_config(CONFIG, ARGS), run_dir=crashed, progress=False)
    monkeypatch.setattr(MixtureTrainer, "step", orig)
    assert (
        torch_load(crashed / "checkpoints" / "last.pt")["step"] == 3 and not (crashed / "final_metrics.json").exists()
    )
    assert [r["step"] for r in _records(crashed)] == [2, 2, 4, 4]

    config = (crashed / "config.yaml").read_text()
    capsys.readouterr()
    assert morl(["resume", str(crashed), "prompts.num=5"]) == 2  # would change the learner
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("morl: error:") and "prompts.num" in err and "steps" in err
    assert (crashed / "config.yaml").read_text() == config
    assert morl(["resume", str(crashed), "--no-progress"]) == 0  # dispatches on run.json
    assert f"resuming {crashed} at step 3" in capsys.readouterr().out
    _assert_same_run(full, crashed, 7)


def test_finished_run_says_so_and_extends_like_a_longer_run(full, tmp_path, capsys):
    run_dir = tmp_path / "run"
    short = [a for a in ARGS if not a.startswith("steps=")] + ["steps=4"]
    assert morl(["prompt", CONFIG, *short, "--run-dir", str(run_dir), "--no-progress"]) == 0  # dispatcher fitted at 4
    before = (run_dir / "checkpoints" / "last.pt").read_bytes()
    capsys.readouterr()
    assert morl(["resume", str(run_dir)]) == 0
    assert "run already finished (4/4 steps)" in capsys.readouterr().out
    assert (run_dir / "checkpoints" / "last.pt").read_bytes() == before
    assert morl(["resume", str(run_dir), "steps=3"]) == 2
    assert "steps=3 is below the checkpoint's step 4" in capsys.readouterr().err
    assert morl(["prompt", "--resume", str(run_dir), "steps=7", "--no-progress"]) == 0
    # The dispatcher's fit at step 4 reseeds torch; training goes on from the RNG as it was before.
    _assert_same_run(full, run_dir, 7)


@pytest.mark.integration  # a subprocess stopped by SIGTERM
def test_sigterm_checkpoints_and_morl_resume_finishes_the_run(tmp_path):
    # 200 steps (a few seconds of CPU): the signal, sent after step 1's record, arrives mid-run.
    args = [CONFIG, *TINY, "steps=200", "eval_every=100", "checkpoint_every=1000"]
    start(
        "prompt", PromptExperiment.load_config(args[0], args[1:]), run_dir=tmp_path / "full", progress=False
    )  # the reference, in process
    run_dir = tmp_path / "stopped"
    sigterm_after_first_record(["prompt", *args], run_dir)
    assert 0 < torch_load(run_dir / "checkpoints" / "last.pt")["step"] < 200
    morl_resume(run_dir)
    _assert_same_run(tmp_path / "full", run_dir, 200)


@pytest.mark.parametrize(
    "bad, says",
    [
        ("optim.learning_rate=0.1", "unknown config key 'optim.learning_rate'"),
        ("log_every=0", "log_every must be >= 1"),
        ("checkpoint_minutes=-1", "checkpoint_minutes must be > 0 or null"),
        ("encoder=/no/such/model", "encoder '/no/such/model' is not a local folder"),
        ("batch_size=100000", "exceeds"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(bad, says, tmp_path, capsys):
    assert morl(["prompt", CONFIG, *ARGS, bad, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("morl: error:") and "\n" not in err and says in err, err
    assert not (tmp_path / "run").exists()


def test_morl_eval_routes_with_the_stored_dispatcher(full, capsys):
    capsys.readouterr()
    assert morl(["eval", str(full)]) == 0
    out = capsys.readouterr().out
    assert "evaluation of" in out and "step 7" in out and "test/routed_acc:" in out and "val/prompt_acc" in out
    written = json.loads((full / "eval" / "step_000000007.json").read_text())
    final = _final(full)
    assert written["kind"] == "prompt" and written["step"] == 7
    # the checkpoint's prompts and dispatcher give the run's own end-of-run numbers again
    assert written["headline"] == written["test/routed_acc"] == final["test"]["routed_acc"] == final["headline"]
    assert written["val/routed_acc"] == final["val"]["routed_acc"]


def test_non_finite_loss_stops_with_exit_3_naming_the_last_good_checkpoint(tmp_path, capsys):
    # Adam moves every parameter by about lr per step: lr = 1e30 makes step 2's logits, hence its
    # loss, non-finite; the trainer raises before that step's update.
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        morl(
            [
                "prompt",
                CONFIG,
                *TINY,
                "steps=7",
                "checkpoint_every=1",
                "optim.lr=1e30",
                "--run-dir",
                str(run_dir),
                "--no-progress",
            ]
        )
    assert stop.value.code == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"morl: error: training diverged at step 2/7: non-finite training loss; lower optim.lr (the parameters "
        f"were not updated); last good checkpoint {run_dir / 'checkpoints' / 'last.pt'} (step 1)"
    )
    assert torch_load(run_dir / "checkpoints" / "last.pt")["step"] == 1
    assert json.loads((run_dir / "run.json").read_text())["status"] == "diverged"
