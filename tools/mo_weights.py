"""Writes morl/metrics/equally_spaced_weights.csv: MORL-Baselines' equally spaced preference sets.

MORL-Baselines' ``equally_spaced_weights(m, n)`` is pymoo's ``get_reference_directions("energy",
m, n, seed=42)``; pymoo needs seconds per set, so morl ships the sets its evaluations use and
``morl.metrics.pareto.equally_spaced_weights`` reads them. Needs pymoo (the `test` extra):

    .venv/bin/python tools/mo_weights.py

Floats are written with ``repr`` (shortest round-trip), so the file reproduces pymoo's values bit
for bit; tests/metrics/test_pareto.py compares the two.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

SIZES = [(m, n) for m in (2, 3) for n in (10, 20, 50, 100)]
OUT = Path(__file__).resolve().parents[1] / "morl" / "metrics" / "equally_spaced_weights.csv"


def main() -> int:
    from pymoo.util.ref_dirs import get_reference_directions

    width = max(m for m, _ in SIZES)
    with open(OUT, "w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["m", "n", *(f"w{j + 1}" for j in range(width))])
        for m, n in SIZES:
            for w in get_reference_directions("energy", m, n, seed=42):
                out.writerow([m, n, *(repr(float(x)) for x in w), *([""] * (width - m))])
    print(f"wrote {OUT} ({len(SIZES)} sets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
