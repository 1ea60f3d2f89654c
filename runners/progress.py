"""The terminal progress bar of a run: units done, rate over a moving window, ETA, latest evaluation."""

from __future__ import annotations

import sys
import time
from collections import deque

from tqdm import tqdm

WINDOW_SECONDS = 60.0  # the rate is measured over the last minute, so a fast warm-up is forgotten within one
HEARTBEAT_SECONDS = 30.0  # off a terminal, a status line at least this often (a log file shows the run is alive)
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


class WindowRate:
    """Units per second over the last ``window`` seconds (at least the last two samples)."""

    def __init__(self, window: float = WINDOW_SECONDS) -> None:
        self.window = window
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, position: int) -> None:
        self.samples.append((now, position))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window:
            self.samples.popleft()

    def skip(self, seconds: float) -> None:
        """Leave out a pause (an evaluation, a checkpoint): the samples so far move ``seconds`` later."""
        self.samples = deque((t + seconds, p) for t, p in self.samples)

    def rate(self) -> float:
        if len(self.samples) < 2:
            return float("nan")
        (t0, p0), (t1, p1) = self.samples[0], self.samples[-1]
        return (p1 - p0) / (t1 - t0) if t1 > t0 else float("nan")


def format_eta(seconds: float) -> str:
    if not seconds == seconds or seconds == float("inf"):  # NaN or unknown
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


class Progress:
    """A tqdm bar over the run's units. ``enabled=None`` shows it only on a terminal."""

    def __init__(
        self, total: int, initial: int = 0, desc: str = "train", enabled: bool | None = None, unit: str = "step"
    ) -> None:
        disable = (not sys.stderr.isatty()) if enabled is None else not enabled
        self.bar = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit=unit,
            dynamic_ncols=True,
            disable=disable,
            bar_format=BAR_FORMAT,
        )
        self.fields: dict[str, str] = {}
        self.total, self.initial, self.position, self.unit = total, initial, initial, unit
        self.start = self._shown = self._beat = time.monotonic()
        self.estimate = True  # whether heartbeat lines give an ETA (the last heartbeat() call's choice)
        self.window = WindowRate()
        self.window.add(self.start, initial)

    def advance(self, n: int = 1) -> None:
        self.position += n
        now = time.monotonic()
        self.window.add(now, self.position)
        if now - self._shown >= 1.0 or self.position >= self.total:
            self._shown = now
            rate = self.window.rate()
            self.fields["rate"] = f"{rate:.3g} {self.unit}/s" if rate == rate else "?"
            self.fields["eta"] = format_eta((self.total - self.position) / rate if rate > 0 else float("nan"))
            self.bar.set_postfix(self.fields, refresh=False)
        self.bar.update(n)
        if self.bar.disable and now - self._beat >= HEARTBEAT_SECONDS:
            self.heartbeat(self.position, self.estimate)

    def exclude(self, seconds: float) -> None:
        """Time spent outside the counted work (an evaluation): the rate and ETA leave it out."""
        self.window.skip(seconds)

    def show(self, **fields: float | str) -> None:
        """Set postfix fields (e.g. ``eval=0.83``, ``tps=540``); they stay until replaced."""
        for key, value in fields.items():
            self.fields[key] = f"{value:.3g}" if isinstance(value, float) else str(value)
        self.bar.set_postfix(self.fields, refresh=False)

    def heartbeat(self, position: int, estimate: bool = True) -> None:
        """Off a terminal (nohup, CI, a log file) print one plain status line instead of a bar;
        ``advance()`` also prints one when none came for ``HEARTBEAT_SECONDS``.

        The ETA uses the moving-window rate; with ``estimate=False`` (e.g. during an RL warm-up,
        which runs far faster than training) no ETA is printed at all.
        """
        if not self.bar.disable:
            return
        now = self._beat = time.monotonic()
        self.estimate = estimate
        rate = self.window.rate()
        eta = (self.total - position) / rate if rate > 0 else float("nan")
        fields = " ".join(f"{k}={v}" for k, v in self.fields.items() if k not in ("rate", "eta"))
        eta_text = f"eta {format_eta(eta)}" if estimate else "eta after warm-up"
        print(
            f"{self.unit} {position}/{self.total} elapsed {(now - self.start) / 60:.1f} min {eta_text} {fields}".rstrip(),
            file=sys.stderr,
            flush=True,
        )

    def message(self, text: str) -> None:
        """A line above the bar (also printed when the bar is hidden)."""
        if self.bar.disable:
            print(text, file=sys.stderr, flush=True)
        else:
            self.bar.write(text, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()
