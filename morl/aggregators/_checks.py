"""Option validation shared by the aggregators: one ValueError line naming what is allowed."""

import math


def check_choice(owner: str, name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{owner} option {name}={value!r} is not valid; allowed: {', '.join(map(str, allowed))}")


def check_number(owner: str, name: str, value, low: float = 0.0, strict: bool = False, integer: bool = False) -> None:
    """``value`` must be a finite real (an int when ``integer``), ``>= low`` (``> low`` when ``strict``)."""
    ok = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and (value > low if strict else value >= low)):
        kind = "int" if integer else "number"
        raise ValueError(
            f"{owner} option {name}={value!r} is not valid; allowed: a finite {kind} {'>' if strict else '>='} {low:g}"
        )


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
