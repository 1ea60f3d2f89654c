"""Starting, resuming and evaluating runs (runners/shell/commands.py), on the worked example of a
new kind of run (docs/examples/new_kind.py, the ``quadratic`` fixture of conftest.py): stop
anywhere and resume to the same end, dispatch of resume/eval on the kind, one-line errors.
The loop's own rules (checkpoints by count and wall-clock time, stops, divergence): test_loop.py."""

import json
from pathlib import Path

import pytest

from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from morl.runners.interrupts import Interrupted
from morl.runners.shell import commands
from morl.runners.shell.run_info import read_run_info
from tests.state_equality import assert_state_equal


def _records(run_dir: Path) -> list[dict]:
    return [
        {k: v for k, v in json.loads(line).items() if k != "time" and not k.startswith("perf/")}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


def _last(run_dir: Path) -> dict:
    return torch_load(run_dir / "checkpoints" / "last.pt")


@pytest.mark.parametrize("stop_at", [1, 7, 10, 23, 39])
def test_a_run_stopped_anywhere_and_resumed_ends_bitwise_equal(quadratic, tmp_path, stop_at):
    full = commands.start("quadratic", quadratic(tmp_path), run_dir=tmp_path / "full", progress=False)
    with pytest.raises(Interrupted, match=f"at step {stop_at}/40.*morl resume"):
        commands.start("quadratic", quadratic(tmp_path), run_dir=tmp_path / "stopped", progress=False, stop_at=stop_at)
    stopped = tmp_path / "stopped"
    assert read_run_info(stopped)["status"] == "interrupted" and _last(stopped)["position"] == stop_at
    commands.resume(stopped, progress=False)
    a, b = _last(full), _last(stopped)
    assert a["position"] == b["position"] == 40
    for key in ("x", "opt", "aggregator", "noise"):
        assert_state_equal(a[key], b[key], key)
    assert _records(full) == _records(stopped)  # every log and eval line once, same values
    assert json.loads((full / "final_metrics.json").read_text()) == json.loads(
        (stopped / "final_metrics.json").read_text()
    )
    assert read_run_info(stopped)["status"] == "finished"


def test_run_json_names_the_kind_and_resume_and_eval_dispatch_on_it(quadratic, tmp_path, capsys):
    run_dir = commands.start("quadratic", quadratic(tmp_path, steps=10), run_dir=tmp_path / "r", progress=False)
    info = read_run_info(run_dir)
    assert (info["kind"], info["status"], info["position"], info["total"], info["unit"]) == (
        "quadratic",
        "finished",
        10,
        10,
        "step",
    )
    capsys.readouterr()
    assert morl(["resume", str(run_dir)]) == 0
    assert "already finished" in capsys.readouterr().out
    assert morl(["resume", str(run_dir), "steps=15"]) == 0
    assert _last(run_dir)["position"] == 15
    assert morl(["eval", str(run_dir)]) == 0
    out = json.loads((run_dir / "eval" / "step_000000015.json").read_text())
    assert out["kind"] == "quadratic" and out["step"] == 15 and set(out["eval/loss"]) == {"a", "b"}
    assert out["headline"] == max(out["eval/loss"].values())


def test_resume_refuses_to_change_the_learner_with_one_line(quadratic, tmp_path, capsys):
    run_dir = commands.start("quadratic", quadratic(tmp_path, steps=5), run_dir=tmp_path / "r", progress=False)
    before = sorted(p.name for p in run_dir.rglob("*"))
    capsys.readouterr()
    assert morl(["resume", str(run_dir), "lr=0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'lr'" in err[0] and "steps" in err[0]
    assert sorted(p.name for p in run_dir.rglob("*")) == before


def test_run_dir_must_be_new_or_empty(quadratic, tmp_path):
    from morl.runners.errors import UserError

    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(UserError, match="already exists.*morl resume"):
        commands.start("quadratic", quadratic(tmp_path), run_dir=tmp_path / "taken", progress=False)


def test_a_setting_added_to_morl_after_the_run_started_does_not_block_its_resume(quadratic, tmp_path, capsys):
    import torch
    import yaml

    run_dir = commands.start("quadratic", quadratic(tmp_path, steps=6), run_dir=tmp_path / "r", progress=False)
    # the run as an older morl wrote it: neither its config.yaml nor its checkpoint has `noise`
    state = torch_load(run_dir / "checkpoints" / "last.pt")
    del state["config"]["noise"]
    torch.save(state, run_dir / "checkpoints" / "last.pt")
    data = yaml.safe_load((run_dir / "config.yaml").read_text())
    del data["noise"]
    (run_dir / "config.yaml").write_text(yaml.safe_dump(data))
    assert morl(["resume", str(run_dir), "steps=8"]) == 0 and _last(run_dir)["position"] == 8
    # ... but a key the user wrote into config.yaml is an edit
    data["lr"] = 0.5
    (run_dir / "config.yaml").write_text(yaml.safe_dump(data))
    capsys.readouterr()
    assert morl(["resume", str(run_dir), "steps=9"]) == 2
    assert "lr: 0.1 -> 0.5" in capsys.readouterr().err
