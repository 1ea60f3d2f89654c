"""Ctrl-C / SIGTERM on the sweep driver: the first signal asks every run to checkpoint and stop
(``term`` in the stop file), a second one after the duplicate window stops them at once (``kill``)."""

import signal

from morl.runners.interrupts import DUPLICATE_SECONDS
from morl.runners.sweep.stop import SweepStop, sweep_stop


def test_a_stop_request_left_by_a_killed_driver_is_removed_at_start(tmp_path):
    (tmp_path / ".stop").write_text("kill\n")
    stop = SweepStop(tmp_path)
    assert not (tmp_path / ".stop").exists() and not stop.requested


def test_the_first_signal_asks_for_checkpoints_and_a_later_one_stops_the_runs_at_once(tmp_path, capsys):
    stop = SweepStop(tmp_path)
    stop._handle(signal.SIGINT, None)
    assert stop.requested and (tmp_path / ".stop").read_text() == "term\n"
    assert "morl sweep: SIGINT received: each run writes a checkpoint and stops" in capsys.readouterr().err
    stop._handle(signal.SIGTERM, None)  # the same request delivered twice (within the window)
    assert (tmp_path / ".stop").read_text() == "term\n" and capsys.readouterr().err == ""
    stop._first_at -= DUPLICATE_SECONDS  # the window has passed: a deliberate second signal
    stop._handle(signal.SIGTERM, None)
    assert (tmp_path / ".stop").read_text() == "kill\n"
    assert "morl sweep: SIGTERM received again: stopping every run now" in capsys.readouterr().err
    stop.clear()
    assert not (tmp_path / ".stop").exists()
    stop.clear()  # nothing left to remove: no error


def test_inside_sweep_stop_sigint_reaches_the_stop_file_and_the_handler_is_restored_after(tmp_path, capsys):
    caught = []
    outer = signal.signal(signal.SIGINT, lambda *_: caught.append("outer"))  # no KeyboardInterrupt if unrouted
    try:
        mine = signal.getsignal(signal.SIGINT)
        with sweep_stop(tmp_path) as stop:
            signal.raise_signal(signal.SIGINT)
            assert stop.requested and (tmp_path / ".stop").read_text() == "term\n"
        assert caught == []  # the sweep's handler had it
        assert not (tmp_path / ".stop").exists()  # the request ends with the block
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, outer)
    assert "SIGINT received" in capsys.readouterr().err
