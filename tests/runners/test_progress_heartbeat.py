"""Off a terminal (nohup, CI, a log file) the progress bar is hidden; a plain status line comes at
least every HEARTBEAT_SECONDS however long the interval between log points (fake clock)."""

import pytest

from morl.runners.progress import HEARTBEAT_SECONDS, Progress


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("morl.runners.progress.time.monotonic", lambda: now[0])
    return now


def _advance(bar, clock, seconds: int, per_second: int = 1) -> None:
    for _ in range(seconds):
        clock[0] += 1.0
        bar.advance(per_second)


def test_without_a_terminal_a_status_line_comes_every_heartbeat_interval(clock, capsys):
    bar = Progress(total=10_000, enabled=False)
    _advance(bar, clock, int(3.5 * HEARTBEAT_SECONDS), per_second=2)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3  # at 30, 60 and 90 s
    assert [line.split()[1] for line in lines] == [f"{int(2 * HEARTBEAT_SECONDS * k)}/10000" for k in (1, 2, 3)]
    bar.close()


def test_a_heartbeat_at_a_log_point_restarts_the_interval(clock, capsys):
    bar = Progress(total=10_000, enabled=False)
    _advance(bar, clock, 20)
    bar.heartbeat(20)  # the loop's line at a log point
    _advance(bar, clock, 25)  # 45 s since the start, 25 s since the last line: nothing
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    _advance(bar, clock, 5)
    assert capsys.readouterr().err.startswith("step 50/10000")
    bar.close()


def test_the_interval_lines_keep_the_warm_up_choice_of_no_eta(clock, capsys):
    bar = Progress(total=10_000, enabled=False)
    bar.heartbeat(0, estimate=False)
    _advance(bar, clock, int(HEARTBEAT_SECONDS))
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("eta after warm-up")
    bar.close()


def test_on_a_terminal_no_status_lines_are_printed(clock, capsys):
    bar = Progress(total=10_000, enabled=True)
    _advance(bar, clock, int(3 * HEARTBEAT_SECONDS))
    bar.close()
    assert "elapsed" not in capsys.readouterr().err
