"""``morl supervised``: a real run writes its files and learns, Δm against a baseline run,
bitwise resume, and one-line errors that write nothing."""

import json
from pathlib import Path

import pytest
import torch

from morl.metrics import delta_m
from morl.runners import cli
from morl.runners.checkpoint import torch_load

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def morl_supervised(*argv):
    """``morl supervised ...`` through the command line's own entry point."""
    return cli.main(["supervised", *argv, "--no-progress"])


def only_run(out: Path) -> Path:
    (run,) = list(out.iterdir())
    return run


def test_registered_in_the_cli():
    assert cli.SUBCOMMANDS["supervised"][0] == "morl.runners.supervised.command"


FAST = ["epochs=3", "eval_every=1", "checkpoint_every=1", "model.hidden=[32]", "optim.lr=0.005", "batch_size=64"]
TINY = ["epochs=2", "eval_every=2", "checkpoint_every=2", "model.hidden=[16]", "batch_size=128"]


def test_digits_run_writes_logs_checkpoint_and_learns(tmp_path, capsys):
    rc = morl_supervised(str(CONFIGS / "supervised_digits_mean.yaml"), *FAST, f"out_dir={tmp_path}")
    assert rc == 0
    run = only_run(tmp_path)
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.pt").is_file()
    assert any((run / "tb").glob("events.out.tfevents.*"))
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [rec["step"] for rec in lines if rec["kind"] == "eval"] == [1, 2, 3]
    assert [rec["step"] for rec in lines if rec["kind"] == "train"] == [1, 2, 3]
    final = json.loads((run / "final_metrics.json").read_text())
    # min(digit, parity) accuracy over config seeds 0..19: min 0.786, median 0.855 (0.8 failed seed 11)
    assert final["test"]["digit/accuracy"] > 0.7 and final["test"]["parity/accuracy"] > 0.7
    assert final["directions"] == {"digit/accuracy": True, "parity/accuracy": True, "large/accuracy": True}
    assert "epoch 3: val digit=" in capsys.readouterr().err


def test_delta_m_against_a_baseline_run(tmp_path):
    base_out, out = tmp_path / "base", tmp_path / "mgda"
    assert morl_supervised(str(CONFIGS / "supervised_digits_mean.yaml"), *TINY, f"out_dir={base_out}") == 0
    base = only_run(base_out)
    assert (
        morl_supervised(str(CONFIGS / "supervised_digits_mgda.yaml"), *TINY, f"out_dir={out}", f"baseline_run={base}")
        == 0
    )
    mine = json.loads((only_run(out) / "final_metrics.json").read_text())
    ref = json.loads((base / "final_metrics.json").read_text())
    assert mine["delta_m"] == pytest.approx(delta_m(mine["test"], ref["test"], mine["directions"]))
    # The same config against itself: deterministic, so Δm is exactly 0.
    again = tmp_path / "again"
    assert (
        morl_supervised(str(CONFIGS / "supervised_digits_mean.yaml"), *TINY, f"out_dir={again}", f"baseline_run={base}")
        == 0
    )
    assert json.loads((only_run(again) / "final_metrics.json").read_text())["delta_m"] == 0.0


def test_resume_continues_bitwise_with_the_jogba_ordering(tmp_path):
    cfg = str(CONFIGS / "supervised_digits_jogba.yaml")
    common = ["eval_every=1", "checkpoint_every=1", "model.hidden=[16]", "batch_size=128", "aggregator.name=mean"]
    assert morl_supervised(cfg, "epochs=4", *common, f"out_dir={tmp_path / 'full'}") == 0
    assert morl_supervised(cfg, "epochs=2", *common, f"out_dir={tmp_path / 'cut'}") == 0
    cut = only_run(tmp_path / "cut")
    with open(cut / "metrics.jsonl", "a") as fh:  # logged by a run killed before its next checkpoint
        fh.write(json.dumps({"step": 3, "epoch": 3}) + "\n")
    assert morl_supervised("--resume", str(cut), "epochs=4") == 0
    full = torch_load(only_run(tmp_path / "full") / "checkpoints" / "last.pt")
    resumed = torch_load(cut / "checkpoints" / "last.pt")
    assert resumed["epoch"] == 4
    for key, value in full["adapter"]["model"].items():
        assert torch.equal(value, resumed["adapter"]["model"][key]), key
    assert torch.equal(full["ordering"]["orders"], resumed["ordering"]["orders"])
    assert [json.loads(x)["step"] for x in (cut / "metrics.jsonl").read_text().splitlines()] == [1, 1, 2, 2, 3, 3, 4, 4]


def test_regression_config_learns(tmp_path):
    rc = morl_supervised(
        str(CONFIGS / "supervised_regression_mgda.yaml"),
        "epochs=5",
        "batch_size=100",
        "eval_every=5",
        f"out_dir={tmp_path}",
    )
    assert rc == 0
    final = json.loads((only_run(tmp_path) / "final_metrics.json").read_text())
    # Targets have variance ~0.5 scale^2; a trained model explains most of it. Worst mse / (0.5 scale^2)
    # over config seeds 0..19: 0.677.
    assert all(final["test"][f"y{k}/mse"] < 0.5 * s**2 for k, s in enumerate([1.0, 2.0, 0.5]))


@pytest.mark.parametrize(
    "argv,message",
    [
        (["supervised_digits_mean.yaml", "epoch=3"], "unknown config key 'epoch'"),
        (["supervised_digits_mean.yaml", "epochs=three"], "epochs: expected an integer"),
        (["missing.yaml"], "does not exist"),
        (["supervised_digits_mean.yaml", "aggregator.name=nope"], "unknown aggregator 'nope'"),
        (["supervised_digits_mean.yaml", "ordering.name=nope"], "unknown ordering 'nope'"),
        (["supervised_digits_mean.yaml", "data.options={tasks: [colour]}"], "unknown digit task"),
        (["supervised_digits_mean.yaml", "task_weights=[1, 2]"], "task_weights has 2 entries for 3 tasks"),
        (["supervised_digits_mean.yaml", "baseline_run=/nonexistent"], "has no final_metrics.json"),
        (["supervised_digits_mean.yaml", "baseline_metrics={digit/accuracy: 0.9}"], "lacks metric"),
    ],
)
def test_bad_input_one_line_error_nothing_written(tmp_path, capsys, argv, message):
    argv = [str(CONFIGS / argv[0])] + argv[1:]
    rc = morl_supervised(*argv, f"out_dir={tmp_path / 'runs'}")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("morl: error:") and message in err[0], err
    assert not (tmp_path / "runs").exists()


def test_resume_needs_a_run_directory_and_keeps_the_learner(tmp_path, capsys):
    assert morl_supervised("--resume", str(tmp_path)) == 2
    assert "is not a morl run directory" in capsys.readouterr().err
    assert (
        morl_supervised(
            str(CONFIGS / "supervised_digits_mean.yaml"),
            "epochs=1",
            "model.hidden=[8]",
            "--run-dir",
            str(tmp_path / "run"),
        )
        == 0
    )
    capsys.readouterr()
    assert morl_supervised("--resume", str(tmp_path / "run"), "aggregator.name=mgda") == 2
    err = capsys.readouterr().err
    assert (
        "'aggregator.name' cannot change a started supervised run; allowed: epochs, eval_every, checkpoint_every" in err
    )
