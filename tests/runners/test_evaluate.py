"""``morl eval RUN_DIR`` (runners/evaluate.py): which options apply to which kind of run, their
ranges, and what is handed to the evaluation (a stand-in records it: nothing is evaluated here;
tests/runners/test_train.py and the per-kind tests evaluate real runs)."""

import json

import pytest

from morl.runners.cli import main as morl
from morl.runners.shell import commands, kinds


def _run(tmp_path, kind: str):
    run = tmp_path / f"{kind}_run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "run.json").write_text(json.dumps({"kind": kind, "status": "finished"}))
    return run


@pytest.fixture
def evaluated(monkeypatch):
    """The calls ``morl eval`` makes to the evaluation, as (run_dir, keyword arguments)."""
    calls = []
    monkeypatch.setattr(commands, "evaluate", lambda run_dir, **kw: calls.append((run_dir, kw)))
    monkeypatch.setenv("MUJOCO_GL", "egl")  # --video chooses a GL backend: keep it out of os.environ
    return calls


@pytest.mark.parametrize(
    "kind, argv, message",
    [
        ("supervised", ["--episodes", "3"], "--episodes applies to RL and MO runs only; {run} is a supervised run"),
        ("mo", ["--episodes", "0"], "--episodes must be >= 1, got 0"),
        ("mo", ["--episodes", "-2"], "--episodes must be >= 1, got -2"),
        ("mo", ["--video"], "--video applies to RL runs only; {run} is a mo run"),
        ("supervised", ["--video-episodes", "2"], "--video applies to RL runs only; {run} is a supervised run"),
    ],
)
def test_an_option_the_run_s_kind_does_not_take_is_one_line_and_nothing_is_evaluated(
    tmp_path, capsys, evaluated, kind, argv, message
):
    run = _run(tmp_path, kind)
    assert morl(["eval", str(run), *argv]) == 2
    assert capsys.readouterr().err.splitlines() == ["morl: error: " + message.replace("{run}", str(run))]
    assert evaluated == []


@pytest.mark.parametrize(
    "kind, argv, expected",
    [
        ("supervised", [], {"checkpoint": None, "overrides": []}),
        ("supervised", ["--device", "cuda:1"], {"checkpoint": None, "overrides": ["device=cuda:1"]}),
        (
            "mo",
            ["--episodes", "3", "--device", "cpu", "--checkpoint", "c.pt"],
            {"checkpoint": "c.pt", "overrides": ["run.device=cpu"], "episodes": 3},
        ),
        ("mo", ["--episodes", "1"], {"checkpoint": None, "overrides": [], "episodes": 1}),
    ],
)
def test_the_options_reach_the_evaluation_under_the_run_s_own_config_keys(tmp_path, evaluated, kind, argv, expected):
    run = _run(tmp_path, kind)
    assert morl(["eval", str(run), *argv]) == 0
    assert evaluated == [(str(run), expected)]


class _RL:  # stands in for the RL experiment class (importing it loads gymnasium: seconds)
    kind = "rl"
    device_key = "run.device"


@pytest.mark.parametrize(
    "argv, episodes",
    [(["--video"], 1), (["--video-episodes", "3"], 3), (["--video", "--video-episodes", "2"], 2)],
)
def test_video_of_an_rl_run_goes_into_the_run_directory_one_episode_by_default(
    tmp_path, monkeypatch, evaluated, argv, episodes
):
    monkeypatch.setattr(kinds, "experiment_class", lambda kind: {"rl": _RL}[kind])
    run = _run(tmp_path, "rl")
    assert morl(["eval", str(run), *argv]) == 0
    assert evaluated == [
        (str(run), {"checkpoint": None, "overrides": [], "video": str(run), "video_episodes": episodes})
    ]


def test_a_video_of_no_episodes_is_refused(tmp_path, monkeypatch, capsys, evaluated):
    monkeypatch.setattr(kinds, "experiment_class", lambda kind: {"rl": _RL}[kind])
    run = _run(tmp_path, "rl")
    assert morl(["eval", str(run), "--video", "--video-episodes", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == ["morl: error: --video-episodes must be >= 1, got 0"]
    assert evaluated == []


def test_a_folder_that_is_no_run_directory_is_refused_before_anything_else(tmp_path, capsys, evaluated):
    assert morl(["eval", str(tmp_path), "--episodes", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"morl: error: '{tmp_path}' is not a morl run directory (no config.yaml)"
    ]
    assert evaluated == []
