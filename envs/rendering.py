"""Frames of deterministic evaluation episodes of a :class:`MultiTaskVecEnv`, to watch an agent.

The caller gives the policy (``obs [num_envs, obs_dim] -> actions``, numpy in and out: this module
knows no learner). For each watched task in turn, the whole vector env steps from ``env.reset()``, as
in :func:`morl.envs.evaluate_policy`, and the task's first sub-env is drawn before every action and
once more at the end of each of its episodes, so an episode of ``T`` steps gives ``T + 1`` frames
(the last one shows the state that ended it: success or time limit).

* Meta-World: MuJoCo renders offscreen from one of the scene's cameras (``corner`` by default).
  A machine without a display needs ``MUJOCO_GL=egl`` (or ``osmesa``) BEFORE MuJoCo is first
  imported (README, "Watching an agent"); :func:`prefer_headless_gl` sets it when nobody did.
* point_mass: a top view drawn with numpy (goal disks, the point), no GL needed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from morl.envs.metaworld_env import MetaWorldVecEnv
from morl.envs.point_mass import PointMassEnv
from morl.envs.vector import MultiTaskVecEnv

#: Meta-World's cameras that show the whole scene, and whether MuJoCo's image from them is
#: upside down (Meta-World's ``corner*`` cameras are mounted rotated by 180 degrees).
CAMERAS = {"corner": True, "corner2": True, "corner3": True, "corner4": True, "topview": False}


@dataclass
class RenderedEpisode:
    """One episode of one sub-env: ``frames [T + 1, size, size, 3] uint8``, success at any step, return."""

    task: str
    frames: np.ndarray
    success: bool
    ret: float


def prefer_headless_gl() -> None:
    """Choose MuJoCo's EGL backend on a Linux machine without a display, unless ``MUJOCO_GL`` is set.

    MuJoCo reads ``MUJOCO_GL`` once, when ``mujoco`` is first imported; its default (GLFW) needs
    a window system. Call this before building a Meta-World env.
    """
    if "mujoco" in sys.modules or os.environ.get("MUJOCO_GL"):
        return
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ["MUJOCO_GL"] = "egl"


def check_render_options(size: int, camera: str) -> None:
    """``ValueError`` naming what is allowed (before anything is rendered or written)."""
    if not isinstance(size, int) or size % 16 or not 64 <= size <= 1024:
        # multiples of 16: H.264 encodes 16x16 macroblocks (imageio would pad other sizes)
        raise ValueError(f"video size must be a multiple of 16 between 64 and 1024 pixels, got {size!r}")
    if camera not in CAMERAS:
        raise ValueError(f"unknown camera {camera!r}; valid cameras: {', '.join(CAMERAS)}")


def render_episodes(
    env: MultiTaskVecEnv,
    policy: Callable[[np.ndarray], np.ndarray],
    episodes: int = 1,
    tasks: list[str] | None = None,
    size: int = 256,
    camera: str = "corner",
) -> dict[str, list[RenderedEpisode]]:
    """``episodes`` rendered episodes of each task in ``tasks`` (default: all), each task's from an ``env.reset()``."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    check_render_options(size, camera)
    names = list(env.task_names) if tasks is None else list(tasks)
    unknown = [t for t in names if t not in env.task_names]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; this env's tasks: {', '.join(env.task_names)}")
    out = {}
    # Task by task, each from env.reset(): one MuJoCo renderer alive at a time (with Mesa each
    # holds ~170 MB: all of MT50's at once would need 8 GB); stepping is cheap next to drawing.
    for task in names:
        painter = make_painter(env, size, camera)
        try:
            out[task] = _Recorder(env, painter, {env.task_names.index(task) * env.envs_per_task: task}, episodes).run(
                policy
            )[task]
        finally:
            painter.close()
    return out


class _Recorder:
    """Steps the env with the policy and collects the frames of the watched sub-envs."""

    def __init__(self, env: MultiTaskVecEnv, painter, watched: dict[int, str], episodes: int) -> None:
        self.env, self.painter, self.watched, self.episodes = env, painter, watched, episodes
        self.current: dict[int, list[np.ndarray]] = {}
        self.done: dict[str, list[RenderedEpisode]] = {t: [] for t in watched.values()}

    def run(self, policy) -> dict[str, list[RenderedEpisode]]:
        env = self.env
        obs, _ = env.reset()
        self.current = {i: [self.painter.frame(i)] for i in self.watched}
        limit = self.episodes * env.max_episode_steps + 1
        # SAME-STEP autoreset resets a finished sub-env inside step(): its last state is visible
        # only just before that reset, so the reset hook is tapped for the duration of the run.
        env._sim_reset = self._tapped_reset(env._sim_reset)
        try:
            for _ in range(limit):
                obs, _, terminated, truncated, info = env.step(
                    np.asarray(policy(obs), np.float32).reshape(env.num_envs, -1)
                )
                self._after_step(terminated | truncated, info)
                if self._finished():
                    return self.done
        finally:
            del env._sim_reset  # the class's method again
        raise RuntimeError(f"rendering did not finish {self.episodes} episode(s) per task within {limit} steps")

    def _tapped_reset(self, reset):
        def tapped(idx: np.ndarray) -> np.ndarray:
            for i in idx:
                if int(i) in self.current:
                    self.current[int(i)].append(self.painter.frame(int(i)))  # the episode's last state
            return reset(idx)

        return tapped

    def _after_step(self, ended: np.ndarray, info: dict) -> None:
        for i, task in self.watched.items():
            if ended[i] and len(self.done[task]) < self.episodes:
                frames = np.stack(self.current[i])
                self.done[task].append(
                    RenderedEpisode(
                        task, frames, bool(info["episode_success"][i] > 0.5), float(info["episode_return"][i])
                    )
                )
                self.current[i] = []
            if len(self.done[task]) < self.episodes:
                self.current[i].append(self.painter.frame(i))
            else:
                self.current.pop(i, None)  # enough episodes: stop drawing this sub-env

    def _finished(self) -> bool:
        return all(len(v) >= self.episodes for v in self.done.values())


def make_painter(env: MultiTaskVecEnv, size: int, camera: str):
    """What draws sub-env ``i`` of ``env``: ``frame(i) -> [size, size, 3] uint8``, then ``close()``."""
    if isinstance(env, PointMassEnv):
        return PointMassPainter(env, size)
    if isinstance(env, MetaWorldVecEnv):
        return MuJoCoPainter([sub for sub in env._envs], size, camera)
    raise ValueError(f"no renderer for {type(env).__name__}; videos exist for Meta-World envs and point_mass")


class PointMassPainter:
    """A top view of the arena: every task's goal disk (grey; the sub-env's own goal green), the point (red)."""

    def __init__(self, env, size: int) -> None:
        self.env, self.size = env, size
        pixel = (np.arange(size) + 0.5) / size * 2 * env.arena - env.arena  # pixel centres in world units
        self.x, self.y = np.meshgrid(pixel, pixel[::-1])  # image row 0 is the top (largest y)
        self.dot = max(env.success_radius / 3, 2 * env.arena / size)

    def _disk(self, centre: np.ndarray, radius: float) -> np.ndarray:
        return (self.x - centre[0]) ** 2 + (self.y - centre[1]) ** 2 <= radius**2

    def frame(self, i: int) -> np.ndarray:
        env = self.env
        image = np.full((self.size, self.size, 3), 255, np.uint8)
        for k, goal in enumerate(env.goals):
            own = k == env.task_ids[i]
            image[self._disk(goal, env.success_radius)] = (60, 180, 75) if own else (200, 200, 200)
        image[self._disk(env._pos[i], self.dot)] = (220, 30, 30)
        return image

    def close(self) -> None:
        pass


class MuJoCoPainter:
    """Offscreen MuJoCo images of Meta-World sub-envs (one renderer per sub-env drawn, made on first use)."""

    def __init__(self, subenvs: list, size: int, camera: str) -> None:
        self.subenvs, self.size, self.camera = subenvs, size, camera
        self.renderers: dict[int, object] = {}

    def _renderer(self, i: int):
        if i not in self.renderers:
            import mujoco

            model = self.subenvs[i].model
            # the offscreen buffer must hold the image (the XML may declare a smaller one)
            model.vis.global_.offwidth = max(model.vis.global_.offwidth, self.size)
            model.vis.global_.offheight = max(model.vis.global_.offheight, self.size)
            try:
                self.renderers[i] = mujoco.Renderer(model, self.size, self.size)
            except Exception as exc:
                raise RuntimeError(
                    f"MuJoCo cannot render offscreen ({type(exc).__name__}: {exc}); on a machine without a display set "
                    "MUJOCO_GL=egl (libegl1, libgl1-mesa-dri) or MUJOCO_GL=osmesa (libosmesa6) before starting (README)"
                ) from exc
        return self.renderers[i]

    def frame(self, i: int) -> np.ndarray:
        renderer = self._renderer(i)
        renderer.update_scene(self.subenvs[i].data, camera=self.camera)
        image = renderer.render()
        return np.ascontiguousarray(image[::-1, ::-1]) if CAMERAS[self.camera] else image

    def close(self) -> None:
        for renderer in self.renderers.values():
            renderer.close()  # free the GL contexts now, not in a finaliser at interpreter exit
        self.renderers.clear()
