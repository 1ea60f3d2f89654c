"""Flower rounds one at a time: the shell's loop calls ``step()`` per round, Flower wants to own
the loop (``run_simulation`` blocks until its ServerApp's main function returns).

Flower's Simulation Runtime runs in a background thread. Its ServerApp runs the rounds of the
federation (:func:`morl.agents.federated.flower_engine.run`) and, after each round, its
``on_round`` callback hands control back: it reports the round and waits until the next
``next_round()`` asks for another one. Between two rounds the server thread is parked inside that
callback, so the main thread may read and checkpoint the federation's state, evaluate it, or stop
(``close()`` makes the parked callback raise, which ends Flower's loop and the simulation).
Ray, the virtual nodes and the ClientApps stay up for the whole run instead of being started
once per round.
"""

from __future__ import annotations

import queue
import threading

from morl.runners.errors import UserError


class _Stop(Exception):
    """Raised in the server thread to end Flower's round loop when the run stops."""


class FlowerRounds:
    """``next_round()`` runs exactly one round of ``fed`` through Flower."""

    def __init__(self, fed, local, seed: int, rounds: int, num_cpus: int | None, cpus_per_client: float) -> None:
        try:
            from morl.agents.federated import flower_engine
        except ImportError as exc:
            raise UserError(f"engine.name=flower needs Flower: pip install 'morl[fl]' ({exc})") from None
        self._run = lambda: flower_engine.run(fed, local, seed, rounds, self._handoff, num_cpus, cpus_per_client)
        self.fed, self.rounds = fed, rounds
        self._go = threading.Semaphore(0)
        self._events: queue.Queue = queue.Queue()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def _handoff(self, round_done: int) -> None:
        # Server thread, after each round: report it, then park until asked for the next one.
        self._events.put(("round", round_done))
        self._go.acquire()
        if self._stopping and round_done < self.rounds:
            raise _Stop  # after the last round Flower's loop ends by itself

    def _serve(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001  handed to the main thread, which raises it
            self._events.put(("error", exc))
        finally:
            self._events.put(("ended", None))

    def next_round(self) -> None:
        if self.fed.round >= self.rounds:
            raise RuntimeError(f"the Flower simulation was started for {self.rounds} rounds; all are done")
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="flower-simulation", daemon=True)
            self._thread.start()
        else:
            self._go.release()
        kind, value = self._events.get()
        if kind == "error" and not self._stopping:
            raise RuntimeError(f"the Flower simulation failed in round {self.fed.round + 1}: {value}") from value
        if kind != "round":
            raise RuntimeError(f"the Flower simulation ended before round {self.fed.round + 1}")

    def close(self, timeout: float = 120.0) -> None:
        """End Flower's loop (and its simulation) if it is parked between rounds."""
        if self._thread is None or not self._thread.is_alive():
            return
        self._stopping = True
        self._go.release()
        self._thread.join(timeout)
