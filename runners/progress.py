"""The terminal progress bar of a training run: steps, rate, ETA and the latest evaluation."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    """A tqdm bar over vector-env steps. ``enabled=None`` shows it only on a terminal."""

    def __init__(self, total: int, initial: int = 0, desc: str = "train", enabled: bool | None = None) -> None:
        disable = (not sys.stderr.isatty()) if enabled is None else not enabled
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="step", dynamic_ncols=True, disable=disable, smoothing=0.05)
        self.fields: dict[str, str] = {}
        self.total, self.initial, self.start = total, initial, time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.bar.update(n)

    def show(self, **fields: float | str) -> None:
        """Set postfix fields (e.g. ``eval=0.83``, ``tps=540``); they stay until replaced."""
        for key, value in fields.items():
            self.fields[key] = f"{value:.3g}" if isinstance(value, float) else str(value)
        self.bar.set_postfix(self.fields, refresh=False)

    def heartbeat(self, step: int, estimate: bool = True) -> None:
        """Off a terminal (nohup, CI, a log file) print one plain status line instead of a bar.

        The ETA uses the rate since the previous heartbeat: the random-action warm-up runs far
        faster than training and would make an average-since-start ETA much too short. With
        ``estimate=False`` (during the warm-up) no ETA is printed at all.
        """
        if not self.bar.disable:
            return
        now = time.monotonic()
        last_step, last_time = getattr(self, "_last", (self.initial, self.start))
        self._last = (step, now)
        rate = (step - last_step) / (now - last_time) if now > last_time and step > last_step else float("nan")
        eta = (self.total - step) / rate if rate > 0 else float("nan")
        fields = " ".join(f"{k}={v}" for k, v in self.fields.items())
        eta_text = f"eta {eta / 3600:.1f} h" if estimate else "eta after warm-up"
        print(f"step {step}/{self.total} elapsed {(now - self.start) / 60:.1f} min {eta_text} {fields}", file=sys.stderr, flush=True)

    def message(self, text: str) -> None:
        """A line above the bar (also printed when the bar is hidden)."""
        if self.bar.disable:
            print(text, file=sys.stderr, flush=True)
        else:
            self.bar.write(text, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()
