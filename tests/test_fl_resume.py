"""``morl fl --resume`` / ``morl resume`` on an FL run: a run interrupted after a checkpoint and
resumed ends bitwise equal to the uninterrupted run (models, strategy state, metrics)."""

import json

import pytest

from morl.agents.federated import simulator
from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from state_equality import assert_state_equal

# The official round exercises every piece of resumable state: pair sampling with cached stale
# deltas, the cumulative Γ average, the switch's avg_S, the curriculum, the OT warm start.
ARGS = ["configs/fl_most_official.yaml", "device=cpu", "data.num_clients=8", "strategy.num_models=3",
        "train.local_steps=3", "train.rounds=9", "train.eval_every=2", "train.checkpoint_every=3",
        "strategy.most.warmup_rounds=1", "strategy.most.sample_fraction=0.25", "strategy.most.gamma_average_start=4"]


def test_interrupted_fl_run_resumes_to_the_same_end(tmp_path, monkeypatch, capsys):
    assert morl(["fl", *ARGS, f"out_dir={tmp_path / 'full'}"]) == 0
    (full,) = (tmp_path / "full").iterdir()

    orig = simulator.Federation.run_round

    def crash_at_8(self, engine):  # dies in round 8: the last checkpoint is round 6
        if self.round == 7:
            raise RuntimeError("simulated crash")
        orig(self, engine)

    monkeypatch.setattr(simulator.Federation, "run_round", crash_at_8)
    with pytest.raises(RuntimeError, match="simulated crash"):
        morl(["fl", *ARGS, f"out_dir={tmp_path / 'crashed'}"])
    monkeypatch.setattr(simulator.Federation, "run_round", orig)
    (crashed,) = (tmp_path / "crashed").iterdir()
    assert torch_load(crashed / "checkpoints" / "last.pt")["round"] == 6
    assert not (crashed / "summary.json").exists()

    capsys.readouterr()
    assert morl(["resume", str(crashed)]) == 0  # dispatches on the run's config to `morl fl --resume`
    assert f"resuming {crashed} at round 6" in capsys.readouterr().out
    a, b = (torch_load(d / "checkpoints" / "last.pt") for d in (full, crashed))
    assert a["round"] == b["round"] == 9
    assert_state_equal(a["federation"], b["federation"], "federation")
    assert_state_equal(a["history"], b["history"], "history")
    assert len(a["federation"]["strategy"]["branches"]) == 8
    assert a["federation"]["strategy"]["cache_deltas"] is not None and a["federation"]["strategy"]["gamma_count"] > 0
    lines = [(d / "metrics.jsonl").read_text().splitlines() for d in (full, crashed)]
    strip = lambda ls: [{k: v for k, v in json.loads(x).items() if k not in ("time", "wall_time")} for x in ls]  # noqa: E731
    assert strip(lines[0]) == strip(lines[1]) and len(lines[0]) == 5  # rounds 2, 4, 6, 8, 9; no repeats
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (full, crashed))
    assert sa["final"] == sb["final"] and sa["best_val"] == sb["best_val"]


def test_resume_rejects_learner_overrides_and_extends_rounds(tmp_path, capsys):
    short = [a for a in ARGS if not a.startswith("train.rounds")] + ["train.rounds=4"]
    assert morl(["fl", *short, f"out_dir={tmp_path}"]) == 0
    (run_dir,) = tmp_path.iterdir()
    capsys.readouterr()
    assert morl(["fl", "--resume", str(run_dir), "strategy.most.sample_fraction=0.5"]) == 2
    err = capsys.readouterr().err
    assert "strategy.most.sample_fraction" in err and "train.rounds" in err
    assert morl(["fl", "--resume", str(tmp_path / "nope")]) == 2
    assert morl(["fl", "--resume", str(run_dir), "train.rounds=6"]) == 0
    assert torch_load(run_dir / "checkpoints" / "last.pt")["round"] == 6
    assert json.loads((run_dir / "summary.json").read_text())["rounds"] == 6
