"""Gradient aggregators: ``build(name, **options)`` returns a callable ``[K, D] -> [D]``."""

from morl import registry
from morl.aggregators.base import Aggregator, GramianAggregator

# name -> "module:Class" (morl/registry.py), imported on first use; each module is named after its key.
REGISTRY: dict[str, str] = {
    name: f"morl.aggregators.{name}:{cls}"
    for name, cls in (
        ("mean", "Mean"),
        ("mgda", "MGDA"),
        ("smg", "SMG"),
        ("pcgrad", "PCGrad"),
        ("cagrad", "CAGrad"),
        ("moco", "MoCo"),
        ("epo_al", "EPOAL"),
        ("upgrad", "UPGrad"),
        ("dualproj", "DualProj"),
        ("imtl_g", "IMTLG"),
        ("aligned_mtl", "AlignedMTL"),
        ("config", "ConFIG"),
        ("uw", "UW"),
        ("dwa", "DWA"),
        ("famo", "FAMO"),
        ("gradnorm", "GradNorm"),
        ("gls", "GLS"),
        ("stch", "STCH"),
        ("nash_mtl", "NashMTL"),
        ("fairgrad", "FairGrad"),
        ("sdmgrad", "SDMGrad"),
        ("modo", "MoDo"),
        ("rlw", "RLW"),
        ("gradvac", "GradVac"),
        ("graddrop", "GradDrop"),
        ("krum", "Krum"),
        ("trimmed_mean", "TrimmedMean"),
        ("cr_mogm", "CRMOGM"),
        ("excess_mtl", "ExcessMTL"),
        ("pcd", "PCD"),
    )
}


def available() -> list[str]:
    return registry.available(REGISTRY)


def aggregator_class(name: str) -> type[Aggregator]:
    return registry.resolve(REGISTRY, name, "aggregator")


def options_of(name: str) -> dict[str, object]:
    """The options ``build(name, ...)`` accepts, with their defaults."""
    return registry.options_of(aggregator_class(name))


def build(name: str, **options) -> Aggregator:
    """The aggregator ``name``; an unknown name or option raises ``ValueError`` listing the valid ones."""
    return registry.build(REGISTRY, name, "aggregator", **options)


def __getattr__(name: str):  # ``from morl.aggregators import MGDA``, imported on first use
    return registry.lazy_class(REGISTRY, name, __name__)


__all__ = [
    "Aggregator",
    "GramianAggregator",
    "REGISTRY",
    "available",
    "aggregator_class",
    "options_of",
    "build",
    *registry.class_names(REGISTRY),
]
