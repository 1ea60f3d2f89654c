"""Gradient aggregators: ``build(name, **options)`` returns a callable ``[K, D] -> [D]``."""

from __future__ import annotations

import importlib
import inspect

from morl.aggregators.base import Aggregator, GramianAggregator

# name -> "module:Class". Modules are imported on first use so one broken method never
# stops the others from loading.
REGISTRY: dict[str, str] = {
    "mean": "morl.aggregators.mean:Mean",
    "mgda": "morl.aggregators.mgda:MGDA",
    "smg": "morl.aggregators.smg:SMG",
    "pcgrad": "morl.aggregators.pcgrad:PCGrad",
    "cagrad": "morl.aggregators.cagrad:CAGrad",
    "moco": "morl.aggregators.moco:MoCo",
    "epo_al": "morl.aggregators.epo_al:EPOAL",
    "upgrad": "morl.aggregators.upgrad:UPGrad",
    "dualproj": "morl.aggregators.dualproj:DualProj",
    "imtl_g": "morl.aggregators.imtl_g:IMTLG",
    "aligned_mtl": "morl.aggregators.aligned_mtl:AlignedMTL",
    "config": "morl.aggregators.config:ConFIG",
    "uw": "morl.aggregators.uw:UW",
    "dwa": "morl.aggregators.dwa:DWA",
    "famo": "morl.aggregators.famo:FAMO",
    "gradnorm": "morl.aggregators.gradnorm:GradNorm",
    "gls": "morl.aggregators.gls:GLS",
    "stch": "morl.aggregators.stch:STCH",
    "nash_mtl": "morl.aggregators.nash_mtl:NashMTL",
    "fairgrad": "morl.aggregators.fairgrad:FairGrad",
    "sdmgrad": "morl.aggregators.sdmgrad:SDMGrad",
    "modo": "morl.aggregators.modo:MoDo",
    "rlw": "morl.aggregators.rlw:RLW",
    "gradvac": "morl.aggregators.gradvac:GradVac",
    "graddrop": "morl.aggregators.graddrop:GradDrop",
    "krum": "morl.aggregators.krum:Krum",
    "trimmed_mean": "morl.aggregators.trimmed_mean:TrimmedMean",
    "cr_mogm": "morl.aggregators.cr_mogm:CRMOGM",
}


def available() -> list[str]:
    """Names accepted by :func:`build`."""
    return sorted(REGISTRY)


def aggregator_class(name: str) -> type[Aggregator]:
    if name not in REGISTRY:
        raise ValueError(f"unknown aggregator {name!r}; valid names: {', '.join(available())}")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


def options_of(name: str) -> dict[str, object]:
    """The options ``build(name, ...)`` accepts, with their defaults."""
    sig = inspect.signature(aggregator_class(name).__init__)
    return {
        p.name: (None if p.default is inspect.Parameter.empty else p.default)
        for p in list(sig.parameters.values())[1:]
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def build(name: str, **options) -> Aggregator:
    """Build the aggregator ``name`` with ``options``.

    Raises ``ValueError`` naming the valid names (unknown ``name``) or the valid options
    (unknown option), so a typo in a config fails loudly instead of being ignored.
    """
    cls = aggregator_class(name)
    valid = options_of(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(unknown)} for aggregator {name!r}; valid options: {', '.join(sorted(valid)) or 'none'}"
        )
    return cls(**options)


def __getattr__(name: str):
    # The public classes, importable as ``from morl.aggregators import MGDA`` and imported on
    # first use like the registry's names.
    for target in REGISTRY.values():
        module, cls = target.split(":")
        if cls == name:
            return getattr(importlib.import_module(module), cls)
    raise AttributeError(f"module 'morl.aggregators' has no attribute {name!r}")


def _class_names() -> list[str]:
    return sorted({target.split(":")[1] for target in REGISTRY.values()})


__all__ = ["Aggregator", "GramianAggregator", "REGISTRY", "available", "aggregator_class", "options_of", "build", *_class_names()]
