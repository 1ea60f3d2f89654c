"""One cell's attempt: a ``morl`` subprocess with its output appended to the cell's log.

Both engines run exactly this function (the local engine in a pool thread, Ray as a task on
any node), so a cell gives the same run whichever engine ran it. A stop is requested through
a file in the sweep directory rather than a signal to this process, because on Ray the
driver cannot reach the task's process: ``term`` asks the run to checkpoint and stop
(SIGTERM, which the shell's loop defers to the end of the current unit), ``kill`` stops it
at once (its last checkpoint stays).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

POLL_SECONDS = 0.5
SIGNALS = {"term": signal.SIGTERM, "kill": signal.SIGKILL}


@dataclass(frozen=True)
class Job:
    cell: str
    args: tuple[str, ...]  # after the program: `train CONFIG k=v ... --run-dir DIR --no-progress`, `resume DIR ...`
    cwd: str
    log: str
    stop_file: str
    threads: int  # OMP_NUM_THREADS of the run
    hide_gpus: bool = (
        False  # resources.gpus == 0: the run sees no GPU (what Ray does for such tasks, here on both engines)
    )
    program: tuple[str, ...] = ()  # default: the `morl` of the Python running this (tests put a stand-in here)


def run_job(job: Job) -> int:
    """Run the job to its end (or until a stop request) and return its exit status."""
    program = list(job.program) or [sys.executable, "-m", "morl.runners.cli"]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(job.threads),
        "MKL_NUM_THREADS": str(job.threads),
        "PYTHONUNBUFFERED": "1",
    }
    if job.hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    Path(job.log).parent.mkdir(parents=True, exist_ok=True)
    with open(job.log, "a", encoding="utf-8") as log:
        log.write(
            f"==== morl sweep {time.strftime('%Y-%m-%dT%H:%M:%S%z')} on {socket.gethostname()}: "
            f"morl {shlex.join(job.args)}\n"
        )
        log.flush()
        # A session of its own: a Ctrl-C at the terminal reaches the sweep driver only, which
        # then stops every run the same way on both engines.
        proc = subprocess.Popen(
            program + list(job.args),
            cwd=job.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        code = _wait(proc, Path(job.stop_file))
        log.write(f"==== exit status {code}\n")
    return code


def _wait(proc: subprocess.Popen, stop_file: Path) -> int:
    sent = ""
    while True:
        try:
            return proc.wait(timeout=POLL_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        request = read_stop(stop_file)
        if request in SIGNALS and request != sent:
            _signal(proc, request)
            sent = request


def _signal(proc: subprocess.Popen, request: str) -> None:
    if request == "kill":  # the run's whole session (Flower, Ray, loader workers): nothing outlives a kill
        os.killpg(proc.pid, signal.SIGKILL)
    else:  # the run alone: it stops its own children as it ends
        proc.send_signal(SIGNALS[request])


def read_stop(stop_file: Path) -> str:
    try:
        return stop_file.read_text().strip()
    except OSError:
        return ""
