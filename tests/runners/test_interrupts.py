"""Ctrl-C / SIGTERM handling: one request delivered twice is still one request."""

import signal

import pytest

from morl.runners import interrupts


def test_a_duplicate_signal_is_one_request_and_a_later_one_stops_at_once(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(interrupts.time, "monotonic", lambda: now[0])
    stop = interrupts.StopRequest()
    stop._handle(signal.SIGTERM, None)
    assert stop.requested and stop.signal_name == "SIGTERM"
    now[0] += interrupts.DUPLICATE_SECONDS / 2  # `timeout make train`: make's process group gets it too
    stop._handle(signal.SIGTERM, None)  # no exception: the checkpoint will still be written
    now[0] += interrupts.DUPLICATE_SECONDS  # a deliberate second Ctrl-C
    with pytest.raises(KeyboardInterrupt):
        stop._handle(signal.SIGINT, None)
