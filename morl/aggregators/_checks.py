"""One-line option validation shared by the aggregators (ValueError naming what is allowed)."""

from __future__ import annotations

import math


def check_choice(owner: str, name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{owner} option {name}={value!r} is not valid; allowed: {', '.join(map(str, allowed))}")


def check_number(owner: str, name: str, value, low: float = 0.0, strict: bool = False, integer: bool = False) -> None:
    """``value`` must be a finite real (an int when ``integer``) ``>= low`` (``> low`` when ``strict``)."""
    kind = "int" if integer else "number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    ok = ok_type and not isinstance(value, bool) and math.isfinite(value) and (value > low if strict else value >= low)
    if not ok:
        raise ValueError(f"{owner} option {name}={value!r} is not valid; allowed: a finite {kind} {'>' if strict else '>='} {low:g}")
