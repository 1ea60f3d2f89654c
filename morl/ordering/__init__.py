"""Data orderings for finite-sum multi-objective training: JoGBa, GraB and baselines.

``build(name, num_samples, num_objectives, **options)`` returns an :class:`Ordering`
(a ``torch.utils.data.Sampler`` with an ``observe(k, grads, direction)`` hook).
"""

from __future__ import annotations

from morl import registry
from morl.ordering.base import Ordering, greedy_signs, make_units, reorder
from morl.ordering.baselines import FlipFlop, RandomFlipFlop, RandomReshuffle
from morl.ordering.discrepancy import combined_discrepancy, herding, signed_prefix_discrepancy
from morl.ordering.grab import GraBSeparate, GraBShared
from morl.ordering.jogba import JoGBa

# name -> "module:Class" (morl/registry.py)
REGISTRY: dict[str, str] = {
    "random": "morl.ordering.baselines:RandomReshuffle",
    "flipflop": "morl.ordering.baselines:FlipFlop",
    "random_flipflop": "morl.ordering.baselines:RandomFlipFlop",
    "grab": "morl.ordering.grab:GraBShared",
    "grab_separate": "morl.ordering.grab:GraBSeparate",
    "jogba": "morl.ordering.jogba:JoGBa",
}


def available() -> list[str]:
    return registry.available(REGISTRY)


def options_of(name: str) -> dict[str, object]:
    """The options ``build(name, num_samples, num_objectives, ...)`` accepts, with their defaults."""
    return registry.options_of(registry.resolve(REGISTRY, name, "ordering"), skip=("num_samples", "num_objectives"))


def build(name: str, num_samples: int, num_objectives: int, **options) -> Ordering:
    """Build ordering ``name``; unknown names or options raise ``ValueError`` listing the valid ones."""
    return registry.build(REGISTRY, name, "ordering", num_samples, num_objectives, **options)


__all__ = [
    "Ordering",
    "RandomReshuffle",
    "FlipFlop",
    "RandomFlipFlop",
    "GraBShared",
    "GraBSeparate",
    "JoGBa",
    "REGISTRY",
    "available",
    "options_of",
    "build",
    "greedy_signs",
    "make_units",
    "reorder",
    "herding",
    "combined_discrepancy",
    "signed_prefix_discrepancy",
]
