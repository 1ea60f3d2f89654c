"""``morl prompt --resume`` / ``morl resume`` on a prompt run: a run crashed after a checkpoint and
resumed ends bitwise equal to the uninterrupted run (prompts, heads, Adam, MosT's plan and
curriculum, generator, dispatcher, metrics); forbidden overrides and finished runs are refused."""

import json
from pathlib import Path

import pytest

from morl.agents.prompts.trainer import MixtureTrainer
from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl
from state_equality import assert_state_equal

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# The paper curriculum makes MosT carry state across steps (its s decays every step).
ARGS = ["prompt", str(CONFIGS / "prompt_most.yaml"), "encoder=tiny", "threads=1", "steps=7", "batch_size=16",
        "eval_every=2", "checkpoint_every=3", "max_length=16", "data.options={train: 48, val: 16, test: 16}",
        "dispatcher.steps=10", "most.curriculum=paper", "most.curriculum_decay=0.8"]


def _metrics(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k != "time"} for x in lines]


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """The uninterrupted run."""
    out = tmp_path_factory.mktemp("full")
    assert morl([*ARGS, f"out_dir={out}"]) == 0
    (run,) = out.iterdir()
    return run


def test_crashed_prompt_run_resumes_to_the_same_end(full, tmp_path, monkeypatch, capsys):

    orig, calls = MixtureTrainer.step, []

    def crash_in_step_6(self, *a):  # the last checkpoint is step 3; step 4's metrics line is already written
        calls.append(1)
        if len(calls) == 6:
            raise RuntimeError("simulated crash")
        return orig(self, *a)

    monkeypatch.setattr(MixtureTrainer, "step", crash_in_step_6)
    with pytest.raises(RuntimeError, match="simulated crash"):
        morl([*ARGS, f"out_dir={tmp_path / 'crashed'}"])
    monkeypatch.setattr(MixtureTrainer, "step", orig)
    (crashed,) = (tmp_path / "crashed").iterdir()
    assert torch_load(crashed / "checkpoints" / "last.pt")["step"] == 3
    assert [m["step"] for m in _metrics(crashed)] == [2, 4] and not (crashed / "final_metrics.json").exists()

    config = (crashed / "config.yaml").read_text()
    capsys.readouterr()
    assert morl(["resume", str(crashed), "prompts.num=5"]) == 2  # would change the learner
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "prompts.num=5" in err and "steps" in err
    assert (crashed / "config.yaml").read_text() == config

    assert morl(["resume", str(crashed)]) == 0  # dispatches on the run's config to `morl prompt --resume`
    assert f"resuming {crashed} at step 3" in capsys.readouterr().out
    a, b = (torch_load(d / "checkpoints" / "last.pt") for d in (full, crashed))
    assert a["step"] == b["step"] == 7 and a["most"]["curriculum"]["s"] == pytest.approx(0.8 ** 7)
    a, b = ({k: v for k, v in d.items() if k != "config"} for d in (a, b))  # configs differ in out_dir only
    assert_state_equal(a, b, "checkpoint")  # prompts, heads, Adam, Γ, curriculum, generator, RNG, dispatcher
    assert _metrics(full) == _metrics(crashed) and [m["step"] for m in _metrics(full)] == [2, 4, 6, 7]
    fa, fb = (json.loads((d / "final_metrics.json").read_text()) for d in (full, crashed))
    fa.pop("seconds"), fb.pop("seconds")
    assert fa == fb



def test_finished_run_says_so_and_extends_like_a_longer_run(full, tmp_path, capsys):
    before = (full / "checkpoints" / "last.pt").read_bytes()
    capsys.readouterr()
    assert morl(["resume", str(full)]) == 0
    assert f"{full} already finished at step 7" in capsys.readouterr().out
    assert (full / "checkpoints" / "last.pt").read_bytes() == before
    assert morl(["prompt", "--resume", str(full), "steps=5"]) == 2
    assert "steps=5 is below the checkpoint's step 7" in capsys.readouterr().err

    short = [a for a in ARGS if not a.startswith("steps=")] + ["steps=4"]
    assert morl([*short, f"out_dir={tmp_path}"]) == 0  # finished at step 4, dispatcher fitted
    (run,) = tmp_path.iterdir()
    assert morl(["prompt", "--resume", str(run), "steps=7"]) == 0
    # The dispatcher's fit at step 4 reseeds torch; training goes on from the RNG as it was before.
    a, b = ({k: v for k, v in torch_load(d / "checkpoints" / "last.pt").items() if k != "config"} for d in (full, run))
    assert_state_equal(a, b, "checkpoint")
    assert _metrics(full) == _metrics(run)
