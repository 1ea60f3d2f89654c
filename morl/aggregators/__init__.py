"""Gradient aggregators: ``build(name, **options)`` returns a callable ``[K, D] -> [D]``."""

from __future__ import annotations

from morl import registry
from morl.aggregators.base import Aggregator, GramianAggregator

# name -> "module:Class" (morl/registry.py): imported on first use.
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
    "excess_mtl": "morl.aggregators.excess_mtl:ExcessMTL",
    "pcd": "morl.aggregators.pcd:PCD",
}


def available() -> list[str]:
    """Names accepted by :func:`build`."""
    return registry.available(REGISTRY)


def aggregator_class(name: str) -> type[Aggregator]:
    return registry.resolve(REGISTRY, name, "aggregator")


def options_of(name: str) -> dict[str, object]:
    """The options ``build(name, ...)`` accepts, with their defaults."""
    return registry.options_of(aggregator_class(name))


def build(name: str, **options) -> Aggregator:
    """Build the aggregator ``name`` with ``options``.

    Raises ``ValueError`` naming the valid names (unknown ``name``) or the valid options
    (unknown option), so a typo in a config fails loudly instead of being ignored.
    """
    return registry.build(REGISTRY, name, "aggregator", **options)


def __getattr__(name: str):
    # The public classes, importable as ``from morl.aggregators import MGDA`` and imported on
    # first use like the registry's names.
    return registry.lazy_class(REGISTRY, name, __name__)


__all__ = ["Aggregator", "GramianAggregator", "REGISTRY", "available", "aggregator_class", "options_of", "build",
           *registry.class_names(REGISTRY)]
