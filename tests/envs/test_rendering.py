"""Rendered evaluation episodes (envs/rendering.py): frames show each state the policy acted in."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from morl.envs import make_env
from morl.envs.rendering import render_episodes

SIZE = 64  # pixels; point_mass's arena is 3 world units wide: 21.3 pixels per unit


def goal_seeking(env, seen):
    """A deterministic policy to the sub-env's own goal (full speed, slowing within 0.2); records what it saw."""

    def policy(obs):
        seen.append(obs.copy())
        goal = env.goals[obs[:, -env.num_tasks :].argmax(1)]
        return np.clip((goal - obs[:, :2]) / 0.2, -1, 1)

    return policy


def red_centre(frame):
    rows, cols = np.nonzero((frame[..., 0] > 200) & (frame[..., 1] < 100))
    return np.array([cols.mean(), rows.mean()])


def to_pixels(pos, arena=1.5):
    """World (x, y) -> (column, row) of the pixel centre, by hand: x = -arena is column -0.5, y = +arena is row -0.5."""
    return np.array([(pos[0] + arena) / (2 * arena) * SIZE - 0.5, (arena - pos[1]) / (2 * arena) * SIZE - 0.5])


def test_point_mass_frames_show_each_state_the_policy_acted_in_and_the_last_one():
    env = make_env("point_mass", seed=0, eval=True)
    seen = []
    out = render_episodes(env, goal_seeking(env, seen), episodes=2, tasks=["goal-1"], size=SIZE)
    assert list(out) == ["goal-1"] and len(out["goal-1"]) == 2
    first, second = out["goal-1"]
    # 20-step episodes: the state before each of the 20 actions, and the state after the last one
    assert first.frames.shape == second.frames.shape == (21, SIZE, SIZE, 3) and first.frames.dtype == np.uint8
    assert first.success and second.success  # the goal is 5 full-speed steps away
    i = env.envs_per_task * 1  # the sub-env drawn: task 1's first
    for t in range(20):
        # the dot is a disk of radius r/3 = 0.067 (1.4 px): its pixel centroid is the position to < 1 px
        np.testing.assert_allclose(red_centre(first.frames[t]), to_pixels(seen[t][i, :2]), atol=1.0)
        np.testing.assert_allclose(red_centre(second.frames[t]), to_pixels(seen[20 + t][i, :2]), atol=1.0)
    # the last frame: one more step of the dynamics from the state of the 20th action (hand formula)
    last = seen[19][i, :2] + 0.1 * 2.0 * np.clip((env.goals[1] - seen[19][i, :2]) / 0.2, -1, 1)
    np.testing.assert_allclose(red_centre(first.frames[20]), to_pixels(last), atol=1.0)
    # the own goal is green, the others grey
    green = (first.frames[0] == (60, 180, 75)).all(-1)
    np.testing.assert_allclose(np.argwhere(green).mean(0)[::-1], to_pixels(env.goals[1]), atol=0.5)


# A fresh interpreter per GL backend: MuJoCo chooses its backend (MUJOCO_GL) when first imported,
# and other test modules may already have imported it (with GLFW, which needs a display).
METAWORLD_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    try:
        import mujoco
        mujoco.Renderer(mujoco.MjModel.from_xml_string("<mujoco/>"), 64, 64).close()
    except Exception as exc:
        print("NO_GL", type(exc).__name__, exc)
        raise SystemExit(0)
    from morl.envs import make_env
    from morl.envs.rendering import render_episodes
    env = make_env("mt1:reach-v3", seed=0, eval=True, max_episode_steps=4)
    push = lambda obs: np.tile(np.array([1.0, 0.0, 0.0, 0.0], np.float32), (env.num_envs, 1))
    (episode,) = render_episodes(env, push, size=64)["reach-v3"]
    np.save({path!r}, episode.frames)
    env.close()
    """
)


def _render_in_subprocess(path):
    """Frames from the first offscreen backend that works (the user's MUJOCO_GL if set), or the reasons none did."""
    failures = []
    for backend in [os.environ["MUJOCO_GL"]] if os.environ.get("MUJOCO_GL") else ["egl", "osmesa"]:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": backend}
        env.pop("PYOPENGL_PLATFORM", None)  # MuJoCo sets it to match the backend
        done = subprocess.run(
            [sys.executable, "-c", METAWORLD_SCRIPT.format(path=str(path))],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        if not done.stdout.startswith("NO_GL"):
            return np.load(path), failures
        failures.append(f"MUJOCO_GL={backend}: {done.stdout.strip()}")
    return None, failures


@pytest.mark.integration  # MuJoCo rendering in a subprocess
def test_metaworld_frame_renders_offscreen(tmp_path):
    frames, failures = _render_in_subprocess(tmp_path / "frames.npy")
    if frames is None:
        pytest.skip(
            "no offscreen GL backend works on this machine (README, 'Watching an agent'): " + "; ".join(failures)
        )
    assert frames.shape == (5, 64, 64, 3) and frames.dtype == np.uint8  # 4 steps -> 5 frames
    assert frames[0].std() > 20  # a scene, not a blank image
    # the hand moved 4 steps along x: the images differ, the static scene around it does not (much)
    changed = np.abs(frames[-1].astype(int) - frames[0].astype(int)).max(-1) > 30
    assert 0.001 < changed.mean() < 0.5
    # Meta-World's robot is red: the arm is in view
    assert ((frames[0][..., 0] > 120) & (frames[0][..., 1] < 60) & (frames[0][..., 2] < 60)).mean() > 0.01
