"""Data orderings for finite-sum multi-objective training: JoGBa, GraB and baselines.

``build(name, num_samples, num_objectives, **options)`` returns an :class:`Ordering`
(a ``torch.utils.data.Sampler`` with an ``observe(k, grads, direction)`` hook).
"""

from __future__ import annotations

import inspect

from morl.ordering.base import Ordering, greedy_signs, make_units, reorder
from morl.ordering.baselines import FlipFlop, RandomFlipFlop, RandomReshuffle
from morl.ordering.discrepancy import combined_discrepancy, herding, signed_prefix_discrepancy
from morl.ordering.grab import GraBSeparate, GraBShared
from morl.ordering.jogba import JoGBa

REGISTRY: dict[str, type[Ordering]] = {
    "random": RandomReshuffle,
    "flipflop": FlipFlop,
    "random_flipflop": RandomFlipFlop,
    "grab": GraBShared,
    "grab_separate": GraBSeparate,
    "jogba": JoGBa,
}


def available() -> list[str]:
    return sorted(REGISTRY)


def options_of(name: str) -> dict[str, object]:
    if name not in REGISTRY:
        raise ValueError(f"unknown ordering {name!r}; valid names: {', '.join(available())}")
    params = {}
    for cls in REGISTRY[name].__mro__:
        if cls is Ordering.__mro__[1]:
            break
        for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                params.setdefault(p.name, None if p.default is inspect.Parameter.empty else p.default)
    return params


def build(name: str, num_samples: int, num_objectives: int, **options) -> Ordering:
    """Build ordering ``name``; unknown names or options raise ``ValueError`` listing the valid ones."""
    valid = set(options_of(name)) - {"num_samples", "num_objectives"}
    unknown = sorted(set(options) - valid)
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for ordering {name!r}; valid options: {', '.join(sorted(valid))}")
    return REGISTRY[name](num_samples, num_objectives, **options)


__all__ = [
    "Ordering", "RandomReshuffle", "FlipFlop", "RandomFlipFlop", "GraBShared", "GraBSeparate", "JoGBa",
    "REGISTRY", "available", "options_of", "build", "greedy_signs", "make_units", "reorder",
    "herding", "combined_discrepancy", "signed_prefix_discrepancy",
]
