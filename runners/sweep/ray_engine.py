"""The ``ray`` engine: each cell a Ray task reserving the spec's CPUs and GPUs, running the same
``morl`` subprocess as the local engine (``worker.run_job``), on a cluster (``--address``) or
on a Ray instance started for this sweep on this machine.

On a cluster every node must see the sweep directory and the base configs at the same paths
(a shared filesystem) and have morl installed in the same Python as the workers.
"""

from __future__ import annotations

import logging
import os
import warnings

from morl.runners.errors import UserError
from morl.runners.sweep.local_engine import usable_cpus
from morl.runners.sweep.worker import Job, run_job


class RayEngine:
    name = "ray"

    def __init__(self, address: str | None, cpus_per_run: int, gpus_per_run: float) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing leaves the machine
        import ray

        self.ray = ray
        try:
            self._init(address)
        except ConnectionError as exc:
            raise UserError(
                f"cannot join the Ray cluster at {address!r} ({str(exc).splitlines()[0]}); "
                "start one with `ray start --head` or leave out --address for a local Ray instance"
            ) from None
        self.capacity = self._capacity(cpus_per_run, gpus_per_run)
        # Ray must not re-run a task itself: retries are the sweep's, decided from the run directory.
        self.task = ray.remote(num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=0)(run_job)

    def _init(self, address: str | None) -> None:
        quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
        with warnings.catch_warnings():
            # Ray 2.55 warns on every start that it will stop hiding GPUs from num_gpus=0 tasks;
            # the sweep hides them itself (worker.Job.hide_gpus), on both engines.
            warnings.simplefilter("ignore", FutureWarning)
            if address:
                self.ray.init(address=address, **quiet)
            else:  # "local": a new instance, never one found through RAY_ADDRESS or a running `ray start`
                self.ray.init(address="local", num_cpus=usable_cpus(), **quiet)

    def _capacity(self, cpus: int, gpus: float) -> int:
        total = self.ray.cluster_resources()
        fits = int(total.get("CPU", 0) // cpus)
        if gpus > 0:
            fits = min(fits, int(total.get("GPU", 0) // gpus))
        if fits < 1:
            self.close()
            raise UserError(
                f"the Ray cluster cannot fit one run (resources: cpus={cpus}, gpus={gpus:g}; "
                f"cluster: {total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} GPUs); lower resources"
            )
        return fits

    def submit(self, job: Job):
        return self.task.remote(job)

    def wait(self, handles: list, timeout: float) -> list[tuple[object, int | None, str]]:
        """The handles that ended within ``timeout`` seconds: (handle, exit status, error)."""
        if not handles:
            return []
        ready, rest = self.ray.wait(handles, num_returns=1, timeout=timeout)
        if ready and rest:
            more, _ = self.ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        out = []
        for ref in ready:
            try:
                out.append((ref, self.ray.get(ref), ""))
            except Exception as exc:  # the task's node or worker died: the sweep retries the cell
                out.append((ref, None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
        return out

    def close(self) -> None:
        if self.ray.is_initialized():
            self.ray.shutdown()
