"""Name registries, one style for all: ``{name: "module:Class"}``, imported on first use (so
``import morl`` stays cheap and one broken entry never stops the others), with one way of
listing names, reading a class's options and building it with unknown names and options
rejected in one line that lists the valid ones. Used by ``morl.aggregators``,
``morl.ordering`` and the run kinds of ``morl.runners.shell.kinds``.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any


def available(entries: dict[str, str]) -> list[str]:
    return sorted(entries)


def resolve(entries: dict[str, str], name: str, what: str) -> type:
    """The class registered as ``name``; ``ValueError`` naming the valid names otherwise."""
    if name not in entries:
        raise ValueError(f"unknown {what} {name!r}; valid names: {', '.join(available(entries))}")
    module, cls = entries[name].split(":")
    return getattr(importlib.import_module(module), cls)


def options_of(cls: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Keyword options of ``cls(...)`` with their defaults (None where required), following
    ``**kwargs`` up the class hierarchy; ``skip`` names positional arguments given by the caller."""
    params: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass is object or "__init__" not in vars(klass):
            continue
        signature = inspect.signature(klass.__init__)
        for p in list(signature.parameters.values())[1:]:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip:
                params.setdefault(p.name, None if p.default is inspect.Parameter.empty else p.default)
        if not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
            break  # this __init__ passes nothing further up
    return params


def build(entries: dict[str, str], name: str, what: str, *args: Any, **options: Any) -> Any:
    """``Class(*args, **options)`` for the entry ``name``, unknown options rejected by name."""
    cls = resolve(entries, name, what)
    valid = options_of(cls, skip=tuple(list(inspect.signature(cls.__init__).parameters)[1 : 1 + len(args)]))
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(unknown)} for {what} {name!r}; valid options: {', '.join(sorted(valid)) or 'none'}"
        )
    return cls(*args, **options)


def class_names(entries: dict[str, str]) -> list[str]:
    return sorted({target.split(":")[1] for target in entries.values()})


def lazy_class(entries: dict[str, str], attribute: str, package: str) -> type:
    """Module ``__getattr__`` support: a registered class by its class name, imported on use."""
    for target in entries.values():
        module, cls = target.split(":")
        if cls == attribute:
            return getattr(importlib.import_module(module), cls)
    raise AttributeError(f"module {package!r} has no attribute {attribute!r}")
