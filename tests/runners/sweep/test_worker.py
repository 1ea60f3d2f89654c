"""One cell's attempt: the stop file turned into signals to the run, and (in a subprocess) the
run's environment, its log and its exit status."""

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from morl.runners.sweep import worker
from morl.runners.sweep.worker import Job, _wait, read_stop, run_job


def test_the_stop_request_is_the_stop_files_text_or_nothing(tmp_path):
    assert read_stop(tmp_path / ".stop") == ""  # no request
    (tmp_path / ".stop").write_text("term\n")
    assert read_stop(tmp_path / ".stop") == "term"
    assert read_stop(tmp_path) == ""  # unreadable: no request


class Run:
    """A stand-in process: at its n-th poll the stop file says ``requests[n]``; SIGKILL ends it."""

    def __init__(self, stop_file, requests, exits_after=None):
        self.stop_file, self.requests, self.exits_after = stop_file, list(requests), exits_after
        self.polls, self.sent, self.code, self.pid = 0, [], None, 4242

    def wait(self, timeout):
        if self.code is not None:
            return self.code
        if self.polls == self.exits_after:
            return 0
        request = self.requests[self.polls] if self.polls < len(self.requests) else ""
        if request:
            self.stop_file.write_text(request + "\n")
        else:
            self.stop_file.unlink(missing_ok=True)
        self.polls += 1
        raise subprocess.TimeoutExpired("morl", timeout)

    def send_signal(self, sig):
        self.sent.append(sig)
        if sig == signal.SIGKILL:
            self.code = -9


def test_term_is_sent_once_however_often_it_is_read_then_kill_stops_the_runs_group(tmp_path, monkeypatch):
    run = Run(tmp_path / ".stop", ["", "term", "term", "term", "kill"])
    groups = []
    monkeypatch.setattr(worker.os, "killpg", lambda pid, sig: (groups.append((pid, sig)), run.send_signal(sig)))
    assert _wait(run, tmp_path / ".stop") == -9
    assert run.sent == [signal.SIGTERM, signal.SIGKILL] and run.polls == 5
    assert groups == [(run.pid, signal.SIGKILL)]  # SIGTERM went to the run alone


def test_a_run_ends_with_its_own_exit_status_and_an_unknown_request_sends_nothing(tmp_path):
    run = Run(tmp_path / ".stop", ["", "pause", "stop"], exits_after=3)
    assert _wait(run, tmp_path / ".stop") == 0
    assert run.sent == []


RUN = textwrap.dedent(
    """
    import os, sys
    print("threads", os.environ["OMP_NUM_THREADS"], os.environ["MKL_NUM_THREADS"], os.environ["PYTHONUNBUFFERED"])
    print("gpus", repr(os.environ.get("CUDA_VISIBLE_DEVICES", "all")))
    sys.exit(int(sys.argv[1]))
    """
)


@pytest.mark.integration  # starts a process
def test_a_job_runs_the_program_with_its_threads_and_appends_to_the_cells_log(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # every GPU, unless the job hides them

    def job(code, hide_gpus):
        return Job(
            "c",
            (str(code),),
            str(tmp_path),
            str(tmp_path / "logs" / "c.log"),
            str(tmp_path / ".stop"),
            threads=3,
            hide_gpus=hide_gpus,
            program=(sys.executable, "-c", RUN),
        )

    assert run_job(job(7, hide_gpus=True)) == 7
    assert run_job(job(0, hide_gpus=False)) == 0
    lines = (tmp_path / "logs" / "c.log").read_text().splitlines()
    assert [line for line in lines if not line.startswith("==== morl sweep ")] == [
        "threads 3 3 1",
        "gpus ''",
        "==== exit status 7",
        "threads 3 3 1",
        "gpus 'all'",
        "==== exit status 0",
    ]
    headers = [line for line in lines if line.startswith("==== morl sweep ")]
    assert len(headers) == 2 and headers[0].endswith(": morl 7") and headers[1].endswith(": morl 0")


@pytest.mark.integration  # starts a process
def test_a_term_request_reaches_the_run_as_sigterm(tmp_path):
    (tmp_path / ".stop").write_text("term\n")
    job = Job(
        "c",
        ("60",),
        str(tmp_path),
        str(tmp_path / "c.log"),
        str(tmp_path / ".stop"),
        threads=1,
        program=(sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1]))"),
    )
    assert run_job(job) == -signal.SIGTERM
    assert (tmp_path / "c.log").read_text().splitlines()[-1] == f"==== exit status {-signal.SIGTERM}"


GRANDPARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    open(sys.argv[1], "w").write(str(child.pid))
    time.sleep(120)
    """
)


@pytest.mark.integration  # starts processes
def test_a_kill_request_ends_the_processes_the_run_started_too(tmp_path):
    pid_file, stop_file = tmp_path / "child.pid", tmp_path / ".stop"

    def request_kill():
        while not pid_file.exists() or not pid_file.read_text():
            time.sleep(0.05)
        stop_file.write_text("kill\n")

    threading.Thread(target=request_kill, daemon=True).start()
    job = Job("c", (str(pid_file),), str(tmp_path), str(tmp_path / "c.log"), str(stop_file), threads=1,
              program=(sys.executable, "-c", GRANDPARENT))  # fmt: skip
    assert run_job(job) == -signal.SIGKILL
    child = int(pid_file.read_text())
    for _ in range(100):  # the orphan is reaped by init shortly after the kill
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the run's child {child} outlived the kill")
