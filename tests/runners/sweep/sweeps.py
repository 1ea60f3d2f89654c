"""Sweeps for the sweep tests: specs, a sweep of stand-in runs (fake_run.py), real point-mass
sweeps with tiny networks, and what a sweep's folder says about each cell."""

import json
import os
import signal
import sys
import time
from pathlib import Path

import yaml

from morl.runners import cli
from morl.runners.sweep.cells import expand
from morl.runners.sweep.local_engine import LocalEngine
from morl.runners.sweep.manifest import sweep_dir, write_manifest
from morl.runners.sweep.scheduler import Scheduler
from morl.runners.sweep.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
QUICK = str(ROOT / "configs" / "quickstart_point_mass.yaml")
FAKE = (sys.executable, str(Path(__file__).with_name("fake_run.py")))


def write_spec(tmp_path: Path, **keys) -> Path:
    spec = {"name": "s", "out_dir": str(tmp_path / "out"), "base": QUICK, **keys}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def fake_sweep(tmp_path: Path, progress=False, **keys):
    """Expand, write the manifest and return (folder, cells, run) with ``run()`` -> exit status."""
    spec = load_spec(write_spec(tmp_path, **keys))
    cells, folder = expand(spec), sweep_dir(spec)
    write_manifest(folder, spec, cells)

    def run(max_parallel=None):
        engine = LocalEngine(spec.resources.cpus)
        scheduler = Scheduler(
            folder,
            cells,
            engine,
            max_retries=spec.max_retries,
            threads=1,
            max_parallel=max_parallel,
            program=FAKE,
            progress=progress,
        )
        try:
            return scheduler.run()
        finally:
            engine.close()

    return folder, cells, run


def attempts(folder: Path, cell: str) -> list[str]:
    """``start``/``resume`` per attempt, from the log's header lines (written by the worker)."""
    lines = (folder / "logs" / f"{cell}.log").read_text().splitlines()
    return ["resume" if " morl resume " in line else "start" for line in lines if line.startswith("==== morl sweep ")]


def run_status(folder: Path, cell: str) -> str:
    return json.loads((folder / cell / "run.json").read_text())["status"]


def kill_when_checkpointed(run_dir: Path, timeout: float = 30.0, sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` to the process that owns ``run_dir`` (its pid is in .lock) once it has a checkpoint."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lock, ckpt = run_dir / ".lock", run_dir / "checkpoints" / "last.pt"
        if ckpt.is_file() and lock.is_file() and lock.read_text().strip():
            pid = int(lock.read_text().split()[0])
            os.kill(pid, sig)
            return pid
        time.sleep(0.01)
    raise AssertionError(f"{run_dir} got no checkpoint within {timeout} s")


# tests/runners/test_resume.py's tiny point-mass settings; 120 steps leave the kill below a window of
# about a second between the first checkpoint (step 20) and the end.
TINY = {
    "aggregator.options": {},
    "agent.hidden_sizes": [32, 32],
    "agent.batch_size": 64,
    "agent.buffer_capacity": 4000,
    "run.device": "cpu",
    "run.warmup_steps": 10,
    "run.log_every": 7,
    "run.eval_every": 25,
    "run.checkpoint_every": 20,
    "run.eval_episodes": 1,
}


def morl(*argv) -> int:
    return cli.main([str(a) for a in argv])


def logs(folder: Path) -> str:
    """Every cell's log, for the failure message of a real sweep."""
    return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in sorted((folder / "logs").glob("*.log")))


def real_spec(tmp_path: Path, out: str, seeds, total_steps: int, max_retries: int = 1) -> Path:
    spec = {
        "name": "agg",
        "out_dir": str(tmp_path / out),
        "base": QUICK,
        "grid": {"aggregator.name": ["mgda", "pcgrad"]},
        "seeds": seeds,
        "overrides": {**TINY, "run.total_steps": total_steps},
        "max_retries": max_retries,
    }
    path = tmp_path / f"{out}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
