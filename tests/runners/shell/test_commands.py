"""The experiment shell, on the worked example of a new kind of run (docs/examples/new_kind.py):
stop anywhere and resume to the same end, checkpoints by count, by wall-clock time and on
request, run.json statuses, dispatch of resume/eval on the kind, one-line errors."""

import json
import sys
from pathlib import Path

import pytest

from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from morl.runners.divergence import Diverged
from morl.runners.interrupts import Interrupted
from morl.runners.shell import commands, kinds
from morl.runners.shell.run_info import read_run_info
from tests.state_equality import assert_state_equal

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"


@pytest.fixture
def quadratic(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setitem(kinds.KINDS, "quadratic", "new_kind:QuadraticExperiment")
    from new_kind import QuadraticConfig, QuadraticExperiment

    def config(tmp_path, **changes):
        return QuadraticExperiment.load_config(None, [f"out_dir={tmp_path}", *(f"{k}={v}" for k, v in changes.items())])

    yield config
    sys.modules.pop("new_kind", None)
    assert QuadraticConfig  # imported for the reader: the schema is the config file's keys


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


def test_checkpoints_come_by_count_by_wall_clock_and_at_the_end(quadratic, tmp_path, monkeypatch):
    import morl.runners.shell.checkpoints as ckpt
    import morl.runners.shell.loop as loop

    saved, real_save = [], ckpt.save_checkpoint
    monkeypatch.setattr(ckpt, "save_checkpoint", lambda exp, d: saved.append(exp.position) or real_save(exp, d))
    commands.start(
        "quadratic", quadratic(tmp_path, steps=12, checkpoint_every=5), run_dir=tmp_path / "a", progress=False
    )
    assert saved == [5, 10, 12]
    now = [0.0]
    monkeypatch.setattr(loop.time, "monotonic", lambda: now[0])
    real_step = sys.modules["new_kind"].QuadraticExperiment.step

    def slow_step(self):  # each step takes 25 s of wall-clock time
        now[0] += 25.0
        real_step(self)

    monkeypatch.setattr(sys.modules["new_kind"].QuadraticExperiment, "step", slow_step)
    saved.clear()
    commands.start(
        "quadratic",
        quadratic(tmp_path, steps=12, checkpoint_every=100, checkpoint_minutes=1),
        run_dir=tmp_path / "b",
        progress=False,
    )
    assert saved == [3, 6, 9, 12]  # 75 s >= 1 min after the previous one, and the end


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


def test_a_diverged_run_is_marked_and_keeps_its_last_good_checkpoint(quadratic, tmp_path):
    cfg = quadratic(tmp_path, steps=400, lr=5.0, checkpoint_every=1, log_every=1000, eval_every=1000)
    with pytest.raises(Diverged):
        commands.start("quadratic", cfg, run_dir=tmp_path / "d", progress=False)
    assert read_run_info(tmp_path / "d")["status"] == "diverged"
    assert bool(_last(tmp_path / "d")["x"].isfinite().all())


def test_legacy_run_directories_are_recognised_by_their_config_keys(tmp_path):
    for keys, kind in (
        (("prompts", "dispatcher"), "prompt"),
        (("strategy", "engine"), "fl"),
        (("data", "epochs"), "supervised"),
        (("run", "agent"), "rl"),
    ):
        run_dir = tmp_path / kind
        run_dir.mkdir()
        (run_dir / "config.yaml").write_text("".join(f"{k}: 1\n" for k in keys))
        assert kinds.kind_of(run_dir) == kind


def test_metrics_are_read_back_at_any_depth_and_ints_stay_ints():
    import numpy as np
    import torch

    from morl.runners.shell.metrics import resolve

    out = resolve(
        {
            "a": torch.tensor(0.5),
            "b": {"c": {"d": torch.tensor([1.0, 2.0])}},
            "n": 3,
            "flag": True,
            "e": np.float32(0.25),
            "f": [torch.tensor(1.0), torch.tensor(2.0)],
            "s": "x",
        }
    )
    assert out == {"a": 0.5, "b": {"c": {"d": [1.0, 2.0]}}, "n": 3, "flag": True, "e": 0.25, "f": [1.0, 2.0], "s": "x"}
    assert type(out["n"]) is int and type(out["a"]) is float


def test_a_stop_during_the_last_unit_just_finishes_the_run(quadratic, tmp_path):
    run_dir = commands.start(
        "quadratic", quadratic(tmp_path, steps=12), run_dir=tmp_path / "r", progress=False, stop_at=12
    )
    assert read_run_info(run_dir)["status"] == "finished" and (run_dir / "final_metrics.json").is_file()


def test_a_signal_while_the_final_metrics_are_computed_stops_at_once_and_resume_redoes_them(
    quadratic, tmp_path, monkeypatch
):
    import os
    import signal

    full = commands.start("quadratic", quadratic(tmp_path, steps=12), run_dir=tmp_path / "full", progress=False)
    cls = sys.modules["new_kind"].QuadraticExperiment
    real_final = cls.final_metrics

    def long_final(self):  # e.g. FORUM's baselines: minutes of work after the last step
        os.kill(os.getpid(), signal.SIGTERM)
        return real_final(self)

    monkeypatch.setattr(cls, "final_metrics", long_final)
    before = signal.getsignal(signal.SIGTERM)  # whatever was installed (pytest's, Ray's after a Ray test)
    with pytest.raises(Interrupted, match="SIGTERM: stopped while computing the final metrics.*morl resume"):
        commands.start("quadratic", quadratic(tmp_path, steps=12), run_dir=tmp_path / "cut", progress=False)
    cut = tmp_path / "cut"
    assert read_run_info(cut)["status"] == "interrupted" and not (cut / "final_metrics.json").exists()
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored
    monkeypatch.setattr(cls, "final_metrics", real_final)
    commands.resume(cut, progress=False)
    assert json.loads((cut / "final_metrics.json").read_text()) == json.loads((full / "final_metrics.json").read_text())
    assert read_run_info(cut)["status"] == "finished"


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"a": ">=1"}, "sec.a must be >= 1, got 0"),
        ({"b": ">0?"}, "sec.b must be > 0 or null, got -1.5"),
        ({"c.d": "[0,1)"}, "sec.c.d must be in [0, 1), got 1.0"),
        ({"e": ">=1"}, "sec.e must be >= 1 (each entry, at least one), got [4, 0]"),
        ({"f": ">=1"}, "sec.f must be >= 1, got None"),
        ({"g": ">0"}, "sec.g must be > 0, got True"),
    ],
)
def test_require_names_the_key_its_value_and_what_is_allowed(rules, message):
    from types import SimpleNamespace

    from morl.runners.config import require
    from morl.runners.errors import UserError

    cfg = SimpleNamespace(a=0, b=-1.5, c=SimpleNamespace(d=1.0), e=[4, 0], f=None, g=True, ok=3, none=None)
    require(cfg, {"ok": ">=1", "none": ">=1?", "c.d": "[0,1]"}, prefix="sec.")  # passes
    with pytest.raises(UserError) as exc:
        require(cfg, rules, prefix="sec.")
    assert str(exc.value) == message


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
