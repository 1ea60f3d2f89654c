"""The local engine: as many runs at a time as ``resources.cpus`` fit in the machine's cores, and
each ended attempt reported as (handle, exit status, error)."""

import threading

import pytest

from morl.runners.sweep import local_engine
from morl.runners.sweep.local_engine import LocalEngine
from morl.runners.sweep.worker import Job


@pytest.mark.parametrize(
    ("cores", "cpus_per_run", "capacity"), [(8, 1, 8), (8, 3, 2), (8, 4, 2), (8, 16, 1), (2, 1, 2)]
)
def test_capacity_is_the_runs_of_cpus_per_run_that_fit_in_the_cores_it_may_use(
    monkeypatch, cores, cpus_per_run, capacity
):
    monkeypatch.setattr(local_engine.os, "cpu_count", lambda: 64)  # the machine; the affinity mask rules
    monkeypatch.setattr(local_engine.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    engine = LocalEngine(cpus_per_run)
    try:
        assert engine.capacity == capacity and engine.name == "local"
    finally:
        engine.close()


@pytest.mark.parametrize(("cores", "capacity"), [(6, 3), (None, 1)])  # unknown core count: one at a time
def test_without_an_affinity_mask_the_machines_cores_count(monkeypatch, cores, capacity):
    monkeypatch.delattr(local_engine.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(local_engine.os, "cpu_count", lambda: cores)
    engine = LocalEngine(2)
    try:
        assert engine.capacity == capacity
    finally:
        engine.close()


def job(cell, code):
    return Job(cell, (str(code),), ".", f"logs/{cell}.log", ".stop", threads=1)


def test_wait_reports_each_ended_attempt_with_its_exit_status_or_its_error(monkeypatch):
    release = threading.Event()

    def run_job(job):  # the worker without a process
        if job.cell == "slow":
            release.wait(10)
        if job.cell == "lost":
            raise RuntimeError("the log cannot be written")
        return int(job.args[0])

    monkeypatch.setattr(local_engine, "run_job", run_job)
    engine = LocalEngine(1)
    try:
        assert engine.wait([], timeout=10) == []  # nothing running: no wait
        handles = {engine.submit(job(cell, code)): cell for cell, code in [("ok", 0), ("bad", 2), ("lost", 0)]}
        ended = []
        for _ in range(3):  # every ended attempt is reported once: three waits at most
            ended += [(handles[h], code, error) for h, code, error in engine.wait(list(handles), timeout=10)]
            handles = {h: c for h, c in handles.items() if c not in {e[0] for e in ended}}
        assert sorted(ended) == [
            ("bad", 2, ""),
            ("lost", None, "RuntimeError: the log cannot be written"),
            ("ok", 0, ""),
        ]
        slow = engine.submit(job("slow", 5))
        assert engine.wait([slow], timeout=0.05) == []  # still running when the timeout ends
        release.set()
        assert engine.wait([slow], timeout=10) == [(slow, 5, "")]
    finally:
        release.set()
        engine.close()
