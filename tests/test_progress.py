"""Status lines off a terminal: the ETA follows the rate since the previous line, none during warm-up."""

import re

from runners.progress import Progress


def test_heartbeat_lines_give_no_eta_during_warm_up_and_the_recent_rate_after(capsys, monkeypatch):
    clock = iter([0.0, 10.0, 20.0])  # start, then two heartbeats 10 s apart
    monkeypatch.setattr("runners.progress.time.monotonic", lambda: next(clock))
    bar = Progress(total=100_000, enabled=False)
    bar.heartbeat(100, estimate=False)  # 100 steps in 10 s of (fast) warm-up
    bar.heartbeat(150, estimate=True)  # 50 steps in the next 10 s: 5 steps/s (since start: 7.5)
    lines = capsys.readouterr().err.strip().splitlines()
    assert "eta after warm-up" in lines[0]
    eta_hours = float(re.search(r"eta ([0-9.]+) h", lines[1]).group(1))
    assert eta_hours == round((100_000 - 150) / 5 / 3600, 1)  # 5.5 h, not 3.7 h
    bar.close()
