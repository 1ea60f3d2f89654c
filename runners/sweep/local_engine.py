"""The ``local`` engine: at most ``capacity`` cells at a time on this machine, each a ``morl``
subprocess (a thread of the pool only waits for its process)."""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from morl.runners.sweep.worker import Job, run_job


def usable_cpus() -> int:
    """The cores this process may run on (its affinity mask, e.g. under ``taskset``), else all."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class LocalEngine:
    name = "local"

    def __init__(self, cpus_per_run: int) -> None:
        # One run per `cpus_per_run` cores: more would oversubscribe (each run sets
        # OMP_NUM_THREADS to its cpus, and the scheduler never starts more than capacity).
        self.capacity = max(1, usable_cpus() // cpus_per_run)
        self.pool = ThreadPoolExecutor(self.capacity, thread_name_prefix="morl-sweep")

    def submit(self, job: Job) -> Future:
        return self.pool.submit(run_job, job)

    def wait(self, handles: list[Future], timeout: float) -> list[tuple[Future, int | None, str]]:
        """The handles that ended within ``timeout`` seconds: (handle, exit status, error)."""
        if not handles:
            return []
        done, _ = wait(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        out = []
        for future in done:
            error = future.exception()
            out.append(
                (future, None if error else future.result(), f"{type(error).__name__}: {error}" if error else "")
            )
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=True)
