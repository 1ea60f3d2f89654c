"""Videos of an agent's evaluation episodes: one file per task and a TensorBoard video per task.

Files: ``<out_dir>/<task>.mp4`` when the ffmpeg plugin of imageio (``imageio-ffmpeg``) is
installed, else ``<out_dir>/<task>.gif`` (Pillow, always installed); a task's episodes play one
after the other. TensorBoard: the tag ``eval/video/<task>`` holds an animated GIF in an image
summary, exactly what ``SummaryWriter.add_video`` writes, encoded here with Pillow because
``add_video`` needs ``moviepy`` (not a dependency of morl).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

DEFAULT_FPS = 20  # Meta-World steps 80 per simulated second: 4x slow motion, point_mass 2x fast


def video_dir(run_dir: str | Path, unit: str, position: int) -> Path:
    """``RUN_DIR/videos/<unit>_<N>``, named like the evaluation's JSON (``eval/<unit>_<N>.json``)."""
    return Path(run_dir) / "videos" / f"{unit}_{position:09d}"


def mp4_available() -> bool:
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        return False
    return True


def record_videos(
    policy: Callable[[np.ndarray], np.ndarray],
    eval_env,
    out_dir: str | Path,
    writer=None,
    episodes: int = 1,
    fps: int = DEFAULT_FPS,
    step: int = 0,
    size: int = 256,
    camera: str = "corner",
) -> list[Path]:
    """Render ``episodes`` deterministic episodes per task and write them; returns the files written.

    ``policy``: numpy observations ``[num_envs, obs_dim]`` -> actions. ``writer``: a
    ``torch.utils.tensorboard.SummaryWriter`` (or None), written at global step ``step``.
    """
    from morl.envs.rendering import check_render_options, render_episodes

    if not 1 <= fps <= 100:
        raise ValueError(f"fps must be between 1 and 100 (GIF frames last a multiple of 10 ms), got {fps}")
    check_render_options(size, camera)  # bad options fail before anything is rendered or written
    rendered = render_episodes(eval_env, policy, episodes=episodes, size=size, camera=camera)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for task, task_episodes in rendered.items():
        frames = np.concatenate([e.frames for e in task_episodes])
        gif = gif_bytes(frames, fps) if writer is not None or not mp4_available() else None  # encoded once
        paths.append(write_video(out_dir / task, frames, fps, gif))
        if writer is not None:
            add_gif(writer, f"eval/video/{task}", frames.shape, gif, step)
    if writer is not None:
        writer.flush()
    return paths


def write_video(stem: Path, frames: np.ndarray, fps: int, gif: bytes | None = None) -> Path:
    """``stem.mp4`` (imageio-ffmpeg, H.264) or ``stem.gif`` (``gif``: its bytes, if already encoded);
    written whole or not at all."""
    suffix = ".mp4" if mp4_available() else ".gif"
    path = stem.with_suffix(suffix)
    # a hidden name next to the target (same filesystem: os.replace is atomic), created with the
    # umask's permissions like any other output (mkstemp's would be 0600)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{suffix}")
    try:
        if suffix == ".mp4":
            import imageio.v2 as imageio

            imageio.mimwrite(tmp, list(frames), fps=fps, codec="libx264", macro_block_size=16)
        else:
            Path(tmp).write_bytes(gif if gif is not None else gif_bytes(frames, fps))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def gif_bytes(frames: np.ndarray, fps: int) -> bytes:
    """An endlessly looping animated GIF of ``frames [T, H, W, 3] uint8``.

    Pillow merges a frame identical to the previous one into it (adding its duration), so the
    playing time, ``T / fps``, is kept even when the frame count is not.
    """
    from PIL import Image

    images = [Image.fromarray(np.asarray(f, np.uint8)) for f in frames]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
    return buffer.getvalue()


def add_gif(writer, tag: str, shape: tuple[int, ...], gif: bytes, step: int) -> None:
    """What ``SummaryWriter.add_video`` logs (an animated GIF of frames ``shape`` = ``[T, H, W, C]``
    as an image summary), without moviepy."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    _, h, w, c = shape
    image = Summary.Image(height=h, width=w, colorspace=c, encoded_image_string=gif)
    # SummaryWriter has no public call for a prebuilt summary; add_video itself goes through this one.
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)


def record_agent_videos(
    agent, eval_env, device, run_dir: str | Path, unit: str, position: int, episodes: int = 1
) -> list[Path]:
    """``morl eval --video``: the agent's deterministic policy, videos into ``video_dir(...)`` and
    the run's TensorBoard folder (``RUN_DIR/tb``, tags ``eval/video/<task>`` at ``position``)."""
    import sys

    import torch
    from torch.utils.tensorboard import SummaryWriter

    def policy(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return agent.act(torch.as_tensor(obs, device=device), deterministic=True).cpu().numpy()

    out_dir = video_dir(run_dir, unit, position)
    print(f"morl: rendering {episodes} episode(s) per task into {out_dir} ...", file=sys.stderr, flush=True)
    writer = SummaryWriter(log_dir=str(Path(run_dir) / "tb"))
    try:
        return record_videos(policy, eval_env, out_dir, writer=writer, episodes=episodes, step=position)
    finally:
        writer.close()
