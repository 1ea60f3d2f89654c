"""A run that goes non-finite ends as status "diverged" in run.json, exit status 3 and one line on
stderr naming the position and what to try; its last checkpoint stays the last finite one, and a
run whose every update was skipped is diverged too (it never trained).

The shell's rules are checked on a walk x_t = t whose "model" (x) or evaluation turns NaN at a
chosen step; then each kind of run is driven to a real divergence by a learning rate that
overflows float32 (every step moves parameters by about lr)."""

import json
from pathlib import Path

import pytest
import torch

from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from morl.runners.run_dir import named_run_dir
from morl.runners.shell.experiment import Experiment, Schedule
from morl.runners.shell.loop import run

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


class Walk(Experiment):
    """x goes 1, 2, 3, ...; from ``nan_at`` on x is NaN, from ``eval_nan_at`` on its evaluation is."""

    kind = command = "walk"

    def __init__(self, total=6, nan_at=None, eval_nan_at=None, skipped=0):
        self.total, self.nan_at, self.eval_nan_at, self.skipped = total, nan_at, eval_nan_at, skipped
        self.x = torch.zeros(1)

    name = out_dir = "walk"
    schedule = property(lambda self: Schedule(self.total, 1, 1, 1))

    def step(self):
        self.position += 1
        self.x = torch.tensor([float("nan") if self.position == self.nan_at else float(self.position)])

    def evaluate(self, **options):
        bad = self.eval_nan_at is not None and self.position >= self.eval_nan_at
        return {"headline": float("nan") if bad else 1.0}

    def config_dict(self):
        return {}

    def skipped_updates(self):
        return min(self.skipped, self.position), self.position

    def state_dict(self):
        return {"format": 1, "config": {}, "x": self.x.clone()}


def _run(tmp_path, exp):
    run_dir = named_run_dir(tmp_path / "run")
    with pytest.raises(SystemExit) as stop:
        run(exp, run_dir, progress=False)
    return run_dir, stop.value.code


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("morl: error:")]
    return line


def _status(run_dir: Path) -> str:
    return json.loads((run_dir / "run.json").read_text())["status"]


def test_a_nan_model_is_never_saved_and_the_run_ends_diverged(tmp_path, capsys):
    run_dir, code = _run(tmp_path, Walk(nan_at=4))
    last = run_dir / "checkpoints" / "last.pt"
    assert code == 3 and _status(run_dir) == "diverged"
    assert _one_line(capsys) == (
        f"morl: error: training diverged at step 4/6: the model holds non-finite (NaN/inf) values (x); "
        f"last good checkpoint {last} (step 3); try a lower learning rate"
    )
    assert torch_load(last)["x"].item() == 3.0 and not (run_dir / "final_metrics.json").exists()


def test_a_non_finite_evaluation_ends_diverged_before_its_checkpoint(tmp_path, capsys):
    run_dir, code = _run(tmp_path, Walk(eval_nan_at=5))
    assert code == 3 and _status(run_dir) == "diverged"
    line = _one_line(capsys)
    assert line.startswith("morl: error: training diverged at step 5/6: the evaluation is non-finite (headline nan)")
    assert "(step 4)" in line and torch_load(run_dir / "checkpoints" / "last.pt")["x"].item() == 4.0


def test_a_nan_before_the_first_checkpoint_says_none_was_written(tmp_path, capsys):
    run_dir, code = _run(tmp_path, Walk(nan_at=1))
    assert code == 3 and "no checkpoint was written before it" in _one_line(capsys)
    assert not (run_dir / "checkpoints" / "last.pt").exists()


def test_a_run_whose_every_update_was_skipped_ends_diverged(tmp_path, capsys):
    run_dir, code = _run(tmp_path, Walk(skipped=6))
    assert code == 3 and _status(run_dir) == "diverged"
    assert "at step 6/6: every one of the 6 updates was non-finite (NaN/inf) and skipped" in _one_line(capsys)
    assert torch_load(run_dir / "checkpoints" / "last.pt")["position"] == 5


def test_some_skipped_updates_still_finish(tmp_path):
    run_dir = named_run_dir(tmp_path / "run")
    run(Walk(skipped=5), run_dir, progress=False)
    assert _status(run_dir) == "finished" and torch_load(run_dir / "checkpoints" / "last.pt")["position"] == 6


# -- each kind of run ---------------------------------------------------------------------------


def _morl_diverges(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        morl([*argv, "--no-progress"])
    assert stop.value.code == 3
    return _one_line(capsys)


def _finite(state) -> bool:
    from morl.runners.divergence import first_nonfinite

    return first_nonfinite(state) is None


def test_supervised_run_with_nan_outputs_ends_diverged_before_any_checkpoint(tmp_path, capsys):
    # lr=1e30: Adam's first step sets weights to about ±1e30; every later forward overflows, so
    # steps 2-34 of epoch 1 are skipped (33 < max_nonfinite_updates). The accuracy headline stays
    # finite (argmax of NaN logits), the validation loss does not: the run stops at epoch 1.
    run_dir = tmp_path / "run"
    line = _morl_diverges(
        [
            "supervised",
            str(CONFIGS / "supervised_digits_mean.yaml"),
            "optim.lr=1e30",
            "epochs=3",
            "eval_every=1",
            "checkpoint_every=1",
            "--run-dir",
            str(run_dir),
        ],
        capsys,
    )
    assert line.startswith(
        "morl: error: training diverged at epoch 1/3: the model outputs NaN/inf (validation digit/loss=nan) "
        "and its last 33 updates were skipped; no checkpoint was written before it; "
    )
    assert "optim.lr" in line and "max_grad_norm" in line
    assert _status(run_dir) == "diverged" and not (run_dir / "checkpoints" / "last.pt").exists()


def test_rl_run_whose_every_update_was_skipped_ends_diverged(tmp_path, capsys):
    # lr=inf: the guarded Adam step can never be taken, so every update is skipped; 40 updates stay
    # under max_nonfinite_updates=100, so only the end of the run can tell
    run_dir = tmp_path / "run"
    line = _morl_diverges(
        [
            "train",
            str(CONFIGS / "quickstart_point_mass.yaml"),
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
            "--run-dir",
            str(run_dir),
        ],
        capsys,
    )
    assert "at step 60/60: every one of the 40 updates was non-finite (NaN/inf) and skipped" in line
    assert "agent.critic_lr" in line and _status(run_dir) == "diverged"
    assert torch_load(run_dir / "checkpoints" / "last.pt")["step"] == 40


def test_fl_run_with_nan_losses_ends_diverged(tmp_path, capsys):
    # lr=1e30: round 1's local steps blow the models up; round 2's transport of their NaN losses fails
    run_dir = tmp_path / "run"
    line = _morl_diverges(
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
            "--run-dir",
            str(run_dir),
        ],
        capsys,
    )
    assert line.startswith("morl: error: training diverged at round ") and "train.lr" in line
    assert _status(run_dir) == "diverged"
    last = run_dir / "checkpoints" / "last.pt"
    assert not last.exists() or _finite(torch_load(last))


# forum and prompt runs stopped this way before the shell's rules too (their fast-tier checks live
# with their shells' tests); here end to end, each with its own learning rate named
@pytest.mark.integration
def test_forum_run_with_a_non_finite_direction_ends_diverged(tmp_path, capsys):
    run_dir = tmp_path / "run"
    line = _morl_diverges(
        [
            "forum",
            str(CONFIGS / "forum_mtl_digits.yaml"),
            "forum.inner_steps=2",
            "mtl.hidden=[16]",
            "iterations=4",
            "eval_every=2",
            "mtl.lr=1e30",
            "--run-dir",
            str(run_dir),
        ],
        capsys,
    )
    assert line.startswith("morl: error: training diverged at iteration 2/4: ") and "mtl.lr" in line
    assert _status(run_dir) == "diverged" and not (run_dir / "checkpoints" / "last.pt").exists()


@pytest.mark.integration
def test_prompt_run_with_a_non_finite_loss_ends_diverged(tmp_path, capsys):
    run_dir = tmp_path / "run"
    line = _morl_diverges(
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
            "--run-dir",
            str(run_dir),
        ],
        capsys,
    )
    assert (
        line.startswith("morl: error: training diverged at step 2/4: non-finite training loss") and "optim.lr" in line
    )
    assert _status(run_dir) == "diverged" and not (run_dir / "checkpoints" / "last.pt").exists()
