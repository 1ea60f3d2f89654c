"""Checks shared by the per-kind shell tests: an interrupted and resumed run must end bitwise
equal to an uninterrupted one (final checkpoint, metrics.jsonl, final_metrics.json), whether it
was stopped in-process or by SIGTERM to ``morl <command>``; a run's status and its one error line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from morl.runners.checkpoint import torch_load
from tests.state_equality import assert_state_equal

ROOT = Path(__file__).resolve().parents[2]
# Deadlines only guard against a hang: a subprocess on a loaded 2-core machine took more than 240 s
# to write its first record (prompt: loading the encoder while two MT10 runs trained).
# Wall-clock values: they differ between any two runs.
TIMING_KEYS = ("time", "seconds", "train_seconds")
TIMING_PREFIXES = ("perf/",)


def _untimed(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING_KEYS and not k.startswith(TIMING_PREFIXES)}


def records(run_dir: Path) -> list[dict]:
    return [_untimed(json.loads(x)) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def final_metrics(run_dir: Path) -> dict:
    return _untimed(json.loads((run_dir / "final_metrics.json").read_text()))


def status(run_dir: Path) -> str:
    return json.loads((run_dir / "run.json").read_text())["status"]


def error_line(capsys) -> str:
    """The one ``morl: error:`` line on stderr, with no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("morl: error:")]
    return line


def assert_same_run(full: Path, resumed: Path) -> None:
    """Final checkpoint bit for bit, the same metric records (no repeats) and final metrics."""
    assert_state_equal(
        torch_load(full / "checkpoints" / "last.pt"), torch_load(resumed / "checkpoints" / "last.pt"), "last.pt"
    )
    a, b = records(full), records(resumed)
    assert len(a) == len(b) and a == b
    assert final_metrics(full) == final_metrics(resumed)
    assert status(full) == status(resumed) == "finished"


def subprocess_env() -> dict[str, str]:
    # The child computes with as many threads as this process, so CPU reductions sum alike.
    return {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}


def sigterm_after_first_record(argv: list[str], run_dir: Path, timeout: float = 600) -> str:
    """Start ``morl ARGV --run-dir RUN_DIR --no-progress``, SIGTERM it once metrics.jsonl has a
    line, check it exits 130 naming the checkpoint and ``morl resume``; returns its stderr."""
    cmd = [sys.executable, "-m", "morl.runners.cli", *argv, "--run-dir", str(run_dir), "--no-progress"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    metrics = run_dir / "metrics.jsonl"
    try:
        deadline = time.time() + timeout
        while not (metrics.is_file() and metrics.stat().st_size):
            assert proc.poll() is None, proc.stderr.read()
            assert time.time() < deadline, f"no metrics within {timeout} s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert str(run_dir / "checkpoints" / "last.pt") in err and f"morl resume {run_dir}" in err, err
    assert status(run_dir) == "interrupted"
    return err


def morl_resume(run_dir: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "morl.runners.cli", "resume", str(run_dir), "--no-progress"]
    done = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done
