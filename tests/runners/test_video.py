"""Videos of evaluation episodes (runners/video.py): one playable file and one TensorBoard video per task."""

import os

import numpy as np
import pytest
from PIL import Image

from morl.envs import make_env
from morl.envs.rendering import render_episodes
from morl.runners import video
from morl.runners.video import record_videos

SIZE = 64  # pixels; point_mass's arena is 3 world units wide: 21.3 pixels per unit


def circling(obs):
    """Moves tangentially round the origin: the point never stands still, so no two consecutive frames are equal."""
    pos = obs[:, :2].astype(np.float64)
    tangent = np.stack([-pos[:, 1], pos[:, 0]], axis=1)
    return tangent / np.linalg.norm(tangent, axis=1, keepdims=True)


def test_record_videos_writes_one_playable_file_and_one_tensorboard_video_per_task(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    monkeypatch.setattr(video, "mp4_available", lambda: False)  # the GIF path, whatever is installed
    env = make_env("point_mass", seed=0, num_tasks=2, eval=True)
    writer = SummaryWriter(str(tmp_path / "tb"))
    paths = record_videos(circling, env, tmp_path / "videos", writer=writer, episodes=2, fps=20, step=7, size=SIZE)
    writer.close()
    assert [p.name for p in paths] == ["goal-0.gif", "goal-1.gif"]
    reference = render_episodes(make_env("point_mass", seed=0, num_tasks=2, eval=True), circling, episodes=2, size=SIZE)
    for path, task in zip(paths, env.task_names):
        frames = np.concatenate([e.frames for e in reference[task]])
        with Image.open(path) as gif:
            assert gif.n_frames == 2 * 21
            back = []
            for n in range(gif.n_frames):
                gif.seek(n)
                assert gif.info["duration"] == 50  # 1000 ms / 20 fps
                back.append(np.asarray(gif.convert("RGB")))
        np.testing.assert_array_equal(np.stack(back), frames)  # 4 colours: the palette is exact
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert set(acc.Tags()["images"]) == {"eval/video/goal-0", "eval/video/goal-1"}
    event = acc.Images("eval/video/goal-0")[0]
    assert event.step == 7 and (event.width, event.height) == (SIZE, SIZE)
    assert event.encoded_image_string == paths[0].read_bytes()  # the same animated GIF
    assert not list((tmp_path / "videos").glob(".*"))  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert all(p.stat().st_mode & 0o777 == 0o666 & ~umask for p in paths)  # readable as any file the user writes


@pytest.mark.skipif(not video.mp4_available(), reason="imageio-ffmpeg is not installed: videos are GIFs")
def test_mp4_has_every_frame(tmp_path):
    import imageio.v2 as imageio

    env = make_env("point_mass", seed=0, num_tasks=1, eval=True)
    (path,) = record_videos(circling, env, tmp_path, episodes=1, size=SIZE)
    assert path.suffix == ".mp4" and len(imageio.mimread(path)) == 21


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"size": 100}, "multiple of 16"),
        ({"camera": "sky"}, "valid cameras: corner"),
        ({"fps": 0}, "fps must be"),
        ({"episodes": 0}, "episodes must be >= 1"),
    ],
)
def test_bad_options_name_what_is_allowed_and_write_nothing(tmp_path, kwargs, message):
    env = make_env("point_mass", seed=0, eval=True)
    with pytest.raises(ValueError, match=message):
        record_videos(circling, env, tmp_path / "videos", **kwargs)
    assert not (tmp_path / "videos").exists()
    with pytest.raises(ValueError, match="this env's tasks: goal-0"):
        render_episodes(env, circling, tasks=["reach-v3"])


@pytest.mark.integration  # trains, then encodes videos
def test_morl_eval_video_writes_videos_of_the_checkpoint(tmp_path, capsys):
    import json
    from pathlib import Path

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from morl.runners.cli import main as morl

    quick = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart_point_mass.yaml")
    run = tmp_path / "run"
    tiny = [
        "agent.hidden_sizes=[16,16]",
        "agent.batch_size=64",
        "run.device=cpu",
        "run.warmup_steps=10",
        "run.total_steps=20",
        "run.log_every=10",
        "run.eval_every=20",
        "run.checkpoint_every=20",
        "run.eval_episodes=1",
    ]
    assert morl(["train", quick, *tiny, "--run-dir", str(run), "--no-progress"]) == 0
    capsys.readouterr()

    assert morl(["eval", str(run), "--video-episodes", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["morl: error: --video-episodes must be >= 1, got 0"]
    assert not (run / "videos").exists()

    assert morl(["eval", str(run), "--video", "--video-episodes", "2"]) == 0
    folder = run / "videos" / "step_000000020"
    names = ["goal-0", "goal-1", "goal-2", "goal-3"]
    suffix = ".mp4" if video.mp4_available() else ".gif"
    assert sorted(p.name for p in folder.iterdir()) == [n + suffix for n in names]
    result = json.loads((run / "eval" / "step_000000020.json").read_text())
    assert result["videos"] == [str(folder / (n + suffix)) for n in names]
    if suffix == ".gif":
        with Image.open(folder / "goal-0.gif") as gif:
            assert sum(_durations(gif)) == 2 * 21 * 50  # two 20-step episodes at 20 fps, however Pillow merged frames
    tags = set()
    for events in (run / "tb").glob("events.*"):
        acc = EventAccumulator(str(events))
        acc.Reload()
        tags |= set(acc.Tags()["images"])
    assert {f"eval/video/{n}" for n in names} <= tags


def _durations(gif):
    for n in range(gif.n_frames):
        gif.seek(n)
        yield gif.info["duration"]
