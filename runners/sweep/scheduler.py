"""The sweep's driver: hand each cell that is not done to the engine, at most ``slots`` at a
time, decide after every attempt from the run directory what happened, retry failed cells up to
``max_retries`` times, and stop everything cleanly on Ctrl-C.

What a cell needs is always read from its run directory (``run_state.next_action``), never
from memory of what was submitted, so an attempt that crashed, a run killed with SIGKILL and
a sweep killed half-way are all picked up the same way, and a finished run is never run again.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections import deque
from pathlib import Path

from morl.runners.sweep.cells import Cell
from morl.runners.sweep.progress import SweepProgress
from morl.runners.sweep.run_state import BUSY, DIVERGED, DONE, START, next_action, stopped_on_purpose
from morl.runners.sweep.status import SweepStatus, log_path
from morl.runners.sweep.stop import SweepStop, sweep_stop
from morl.runners.sweep.worker import POLL_SECONDS, Job

BUSY_POLL_SECONDS = 2.0  # how often a run held by an earlier sweep's process is looked at again


def job_for(
    folder: Path, cell: Cell, action: str, stop: SweepStop, threads: int, gpus: float, program: tuple[str, ...]
) -> Job:
    run_dir = str((folder / cell.run_dir).resolve())
    if action == START:
        args = (cell.command, cell.config, *cell.overrides, "--run-dir", run_dir, "--no-progress")
    else:
        args = ("resume", run_dir, "--no-progress")
    return Job(
        cell.name,
        args,
        os.getcwd(),
        str(log_path(folder, cell).resolve()),
        str(stop.path.resolve()),
        threads,
        gpus == 0,
        program,
    )


class Scheduler:
    def __init__(
        self,
        folder: Path,
        cells: list[Cell],
        engine,
        *,
        max_retries: int,
        threads: int,
        gpus: float = 0.0,
        max_parallel: int | None = None,
        program: tuple[str, ...] = (),
        progress: bool | None = None,
    ) -> None:
        self.folder, self.cells, self.engine = folder, cells, engine
        self.max_retries, self.threads, self.gpus, self.program = max_retries, threads, gpus, program
        self.slots = min(engine.capacity, max_parallel or math.inf, len(cells)) or 1
        self.status = SweepStatus(folder, cells, engine.name)
        self.failures = {c.name: 0 for c in cells}
        self.running: dict[object, tuple[Cell, str, float]] = {}  # engine handle -> (cell, action, start time)
        self.bar = SweepProgress(len(cells), enabled=progress)

    def run(self) -> int:
        """Run every cell to an end; 0 when all are done (or diverged), 1 when some failed, 130 on
        Ctrl-C or when a run was stopped on its own (both resume on the next sweep)."""
        with sweep_stop(self.folder) as stop:
            try:
                self._drive(stop)
            except BaseException:
                stop.request("term")  # the driver failed: leave no run going on without it
                raise
            finally:
                while self.running:  # stopping: the runs checkpoint and exit
                    self._collect(deque(), stop)
                self.status.save()
                self.bar.close()
        counts = self.status.counts()
        return 130 if stop.requested or counts.get("interrupted") else (1 if counts["failed"] else 0)

    def _drive(self, stop: SweepStop) -> None:
        queue, busy = deque(self.cells), deque()
        self._set_aside_busy(queue, busy)
        next_busy_look = time.monotonic() + BUSY_POLL_SECONDS
        while (queue or busy or self.running) and not stop.requested:
            self._launch(queue, busy, stop)
            self._collect(queue, stop)
            if busy and time.monotonic() >= next_busy_look:
                queue.extendleft(reversed(busy))  # look again: their owner may have ended
                busy.clear()
                self._set_aside_busy(queue, busy)
                next_busy_look = time.monotonic() + BUSY_POLL_SECONDS
            if not self.running and (queue or busy) and not self._launchable(queue, busy):
                time.sleep(POLL_SECONDS)

    def _set_aside_busy(self, queue: deque, busy: deque) -> None:
        # all of them before anything starts, since each takes a slot (_launchable)
        for cell in [c for c in queue if next_action(self.folder / c.run_dir) == BUSY]:
            queue.remove(cell)
            busy.append(cell)
            self.status.set(cell.name, "busy")

    def _launchable(self, queue: deque, busy: deque) -> bool:
        # a run still owned by an earlier sweep's process works on this machine: it takes a slot
        return bool(queue) and len(self.running) + len(busy) < self.slots

    def _launch(self, queue: deque, busy: deque, stop: SweepStop) -> None:
        while self._launchable(queue, busy) and not stop.requested:
            cell = queue.popleft()
            run_dir = self.folder / cell.run_dir
            action = next_action(run_dir)
            if action in (DONE, DIVERGED):
                self.status.set(cell.name, action)
                self._show(f"{cell.name}: already {'finished' if action == DONE else 'diverged'}, skipped")
                continue
            if action == BUSY:
                busy.append(cell)
                self.status.set(cell.name, "busy")
                continue
            if action == START and run_dir.exists():
                shutil.rmtree(run_dir)  # started before but no checkpoint and no owner: start afresh
            job = job_for(self.folder, cell, action, stop, self.threads, self.gpus, self.program)
            self.running[self.engine.submit(job)] = (cell, action, time.time())
            self.status.set(cell.name, "running")
            self._show(f"{cell.name}: {action}")

    def _collect(self, queue: deque, stop: SweepStop) -> None:
        for handle, code, error in self.engine.wait(list(self.running), timeout=POLL_SECONDS):
            cell, action, started = self.running.pop(handle)
            self.status.attempt(cell.name, action, started, code, error)
            outcome = next_action(self.folder / cell.run_dir)
            if outcome in (DONE, DIVERGED):
                self.status.set(cell.name, outcome)
                self.bar.ended(cell.name)
                self._show(f"{cell.name} {'finished' if outcome == DONE else 'diverged'}")
            elif stop.requested:
                self.status.set(cell.name, "interrupted")
                self._show(f"{cell.name} stopped (exit status {code})")
            elif stopped_on_purpose(self.folder / cell.run_dir):
                # a signal to this run alone (kill -INT/-TERM PID): it checkpointed and said so in
                # run.json; a retry would undo what someone asked for. The next sweep resumes it.
                self.status.set(cell.name, "interrupted")
                self._show(
                    f"{cell.name} stopped by a signal to its run (exit status {code}); the next morl sweep resumes it"
                )
            else:
                self._failed(cell, code, error, queue)
        self._show()

    def _failed(self, cell: Cell, code: int | None, error: str, queue: deque) -> None:
        self.failures[cell.name] += 1
        why = error or f"exit status {code}"
        if self.failures[cell.name] <= self.max_retries:
            queue.append(cell)
            self.status.set(cell.name, "pending")
            self._show(f"{cell.name} failed ({why}); retry {self.failures[cell.name]} of {self.max_retries}")
        else:
            self.status.set(cell.name, "failed")
            self._show(f"{cell.name} failed ({why}); log {log_path(self.folder, cell)}")

    def _show(self, event: str = "") -> None:
        counts = self.status.counts()
        running = {c.name: self.folder / c.run_dir for c, _, _ in self.running.values()}
        self.bar.update(counts["done"] + counts["diverged"], running, counts["failed"], event)
