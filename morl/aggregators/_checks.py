"""Option validation shared by the aggregators: one ValueError line naming what is allowed."""

import math


def check_choice(owner: str, name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{owner} option {name}={value!r} is not valid; allowed: {', '.join(map(str, allowed))}")


def _allowed(low: float, strict: bool, integer: bool, high: float | None, below: bool) -> str:
    if high is not None:
        return f"a number in [{low:g}, {high:g}{')' if below else ']'}"
    return f"a finite {'int' if integer else 'number'} {'>' if strict else '>='} {low:g}"


def check_number(owner, name, value, low=0.0, strict=False, integer=False, high=None, below=False, many=False):
    """``value`` as a float (an int when ``integer``) if finite, ``>= low`` (``> low`` when ``strict``)
    and, given ``high``, ``<= high`` (``< high`` when ``below``); with ``many``, one such number or a
    list of them, as a tuple."""
    values = tuple(value) if many and isinstance(value, (list, tuple)) else (value,)
    for v in values:
        ok = isinstance(v, int if integer else (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not (ok and (v > low if strict else v >= low) and (high is None or (v < high if below else v <= high))):
            allowed = _allowed(low, strict, integer, high, below) + (" or a list of them" if many else "")
            raise ValueError(f"{owner} option {name}={value!r} is not valid; allowed: {allowed}")
    out = tuple(v if integer else float(v) for v in values)
    return out if many else out[0]


def build_base(owner: str, base, base_options):
    """The inner aggregator ``base`` of a wrapper, with ``check_finite="off"`` (the wrapper checks its input)."""
    from morl.aggregators import available, build

    if not isinstance(base, str) or base not in available():
        raise ValueError(f"{owner} option base={base!r} is not valid; allowed: {', '.join(available())}")
    if base_options is not None and not isinstance(base_options, dict):
        raise ValueError(
            f"{owner} option base_options must be a dict of options for {base!r}, got {type(base_options).__name__}"
        )
    try:
        return build(base, **{"check_finite": "off", **(base_options or {})})
    except ValueError as err:
        raise ValueError(f"{owner} option base_options: {err}") from None
