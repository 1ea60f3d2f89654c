"""The progress bar (runners/progress.py): its rate comes from a moving window, so a fast warm-up is
forgotten a minute after it ended; off a terminal (nohup, CI, a log file) the bar is hidden and a
plain status line comes at least every HEARTBEAT_SECONDS (fake clock)."""

import re

import pytest

from morl.runners.progress import HEARTBEAT_SECONDS, WINDOW_SECONDS, Progress, WindowRate, format_eta


def test_the_window_rate_forgets_a_fast_warm_up():
    window = WindowRate()
    position = 0
    for t in range(0, 101):  # 100 s of warm-up at 775 units/s
        window.add(float(t), position)
        position += 775
    for t in range(101, 400):  # then 20 units/s
        position += 20
        window.add(float(t), position)
        if t >= 100 + WINDOW_SECONDS + 1:
            assert window.rate() == pytest.approx(20.0)
    # a cumulative average would still say (77_500 + 299 * 20) / 399 ≈ 209
    assert window.rate() == pytest.approx(20.0)


def test_the_window_rate_needs_two_samples():
    window = WindowRate()
    assert window.rate() != window.rate()  # NaN
    window.add(0.0, 0)
    window.add(2.0, 10)
    assert window.rate() == 5.0


def test_an_excluded_pause_leaves_the_rate_unchanged():
    """A 60 s evaluation between two stretches at 10 units/s: the rate stays 10, not (600 + 600) / 180."""
    window = WindowRate(window=1000.0)
    for t in range(61):
        window.add(float(t), 10 * t)
    window.skip(60.0)
    for t in range(121, 181):
        window.add(float(t), 10 * (t - 60))
    assert window.rate() == pytest.approx(10.0)
    unskipped = WindowRate(window=1000.0)
    for t in [*range(61), *range(121, 181)]:
        unskipped.add(float(t), 10 * (t - 60 if t > 60 else t))
    assert unskipped.rate() == pytest.approx(1200 / 180)


@pytest.mark.parametrize(
    ("seconds", "text"), [(5, "00:05"), (65, "01:05"), (3600 * 2 + 61, "2:01:01"), (float("nan"), "?")]
)
def test_format_eta(seconds, text):
    assert format_eta(seconds) == text


def test_the_bar_shows_the_window_rate_and_its_eta(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("morl.runners.progress.time.monotonic", lambda: now[0])
    bar = Progress(total=10_000, enabled=False, unit="step")
    for _ in range(200):  # 100 steps/s for 2 s
        now[0] += 0.01
        bar.advance()
    for _ in range(120):  # then 1 step/s for 2 minutes
        now[0] += 1.0
        bar.advance()
    assert bar.fields["rate"] == "1 step/s"
    assert bar.fields["eta"] == format_eta(10_000 - 320)
    bar.close()


def test_heartbeat_lines_give_no_eta_during_warm_up_and_the_window_rate_after(capsys, monkeypatch):
    now = [0.0]
    monkeypatch.setattr("morl.runners.progress.time.monotonic", lambda: now[0])
    bar = Progress(total=100_000, enabled=False)
    for _ in range(10):  # warm-up: 10 steps/s for 10 s
        now[0] += 1.0
        bar.advance(10)
    bar.heartbeat(100, estimate=False)
    for _ in range(100):  # training: 1 step every 2 s for 200 s
        now[0] += 2.0
        bar.advance()
    bar.heartbeat(200, estimate=True)
    lines = capsys.readouterr().err.strip().splitlines()
    assert "eta after warm-up" in lines[0]
    eta = re.search(r"eta ([0-9:]+)", lines[-1]).group(1)
    assert eta == format_eta((100_000 - 200) / 0.5)  # 0.5 steps/s, not the average since start
    bar.close()


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
