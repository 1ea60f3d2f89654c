"""A guard that turns every host<->device transfer a Python program can ask for into an error.

On an accelerator a value read (``.item()``, ``bool(t)``, ``float(t)``, ``.tolist()``,
``.cpu()``, ``.numpy()``) waits for the device (a synchronisation), and a tensor built from
Python data or moved with ``.to``/``copy_`` onto the device is a host->device copy. Under
:func:`forbid_host_traffic` each of them raises :class:`HostTraffic` naming the operation:

* value reads of a tensor on any device but the CPU; with ``strict_cpu`` also of CPU tensors
  (the CPU stands in for the device), except from the call sites in ``allow`` (functions that
  read only on the CPU, where a read costs nothing);
* ``Tensor.to`` / ``copy_`` between two different devices (either direction);
* ``torch.tensor`` / ``torch.as_tensor`` / ``Tensor.new_tensor`` from Python data onto a
  device that is not the CPU (with ``strict_cpu``: onto the CPU too, since the same line
  with ``device=`` the gradients' device copies on an accelerator).

Not caught here (a ``meta`` run catches them: see tests/aggregators/test_update_no_sync.py): reads inside
C++ operators, e.g. ``nonzero``, boolean-mask indexing, ``masked_select``.
"""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager

import pytest
import torch

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


class HostTraffic(AssertionError):
    """A host<->device transfer happened where none is allowed."""


def _device_of(args, kwargs) -> torch.device | None:
    """The target device of a ``Tensor.to`` call, or None when it names none."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.device
        if isinstance(value, torch.device):
            return value
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            try:
                return torch.device(value)
            except (RuntimeError, TypeError):
                continue
    return None


def _caller_allowed(allow: frozenset[tuple[str, str]], depth: int) -> bool:
    frame = sys._getframe(depth)
    name = frame.f_code.co_filename.replace("\\", "/")
    # mutation testing runs renamed copies: x_<func>__mutmut_orig, xǁ<Class>ǁ<func>__mutmut_3
    mutmut = re.fullmatch(r"x(?:ǁ\w+ǁ|_)(\w+?)__mutmut_(?:orig|\d+)", frame.f_code.co_name)
    func_name = mutmut.group(1) if mutmut else frame.f_code.co_name
    return any(name.endswith(path) and func_name == func for path, func in allow)


@contextmanager
def forbid_host_traffic(strict_cpu: bool = False, allow: frozenset[tuple[str, str]] = frozenset()):
    """Patch the transfer points above to raise :class:`HostTraffic` inside the block;
    ``allow`` holds (file path suffix, function name) pairs."""

    def read_guard(name, original):
        def guarded(self, *args, **kwargs):
            on_host = self.device.type == "cpu"
            # depth 2: the function that called the read (frame 1 is this wrapper)
            if not on_host or (strict_cpu and not _caller_allowed(allow, 2)):
                raise HostTraffic(f"Tensor.{name} on a {self.device.type} tensor {tuple(self.shape)}")
            return original(self, *args, **kwargs)

        return guarded

    def to_guard(original):
        def guarded(self, *args, **kwargs):
            target = _device_of(args, kwargs)
            if target is not None and target.type != self.device.type:
                raise HostTraffic(f"Tensor.to from {self.device.type} to {target.type}")
            return original(self, *args, **kwargs)

        return guarded

    def copy_guard(original):
        def guarded(self, src, *args, **kwargs):
            if isinstance(src, torch.Tensor) and src.device.type != self.device.type:
                raise HostTraffic(f"Tensor.copy_ from {src.device.type} to {self.device.type}")
            return original(self, src, *args, **kwargs)

        return guarded

    def data_guard(name, original, data_pos):
        def guarded(*args, **kwargs):
            data = args[data_pos] if len(args) > data_pos else kwargs.get("data")
            device = kwargs.get("device")
            if device is None and data_pos == 1 and isinstance(args[0], torch.Tensor):
                device = args[0].device  # new_tensor puts the data on self's device
            device = torch.device(device) if device is not None else torch.device("cpu")
            if not isinstance(data, torch.Tensor) and (
                device.type != "cpu" or (strict_cpu and not _caller_allowed(allow, 2))
            ):
                raise HostTraffic(f"{name} from Python data onto {device.type}")
            return original(*args, **kwargs)

        return guarded

    with pytest.MonkeyPatch.context() as patch:
        for name in READS:
            patch.setattr(torch.Tensor, name, read_guard(name, getattr(torch.Tensor, name)))
        patch.setattr(torch.Tensor, "to", to_guard(torch.Tensor.to))
        patch.setattr(torch.Tensor, "copy_", copy_guard(torch.Tensor.copy_))
        patch.setattr(torch.Tensor, "new_tensor", data_guard("Tensor.new_tensor", torch.Tensor.new_tensor, 1))
        patch.setattr(torch, "tensor", data_guard("torch.tensor", torch.tensor, 0))
        patch.setattr(torch, "as_tensor", data_guard("torch.as_tensor", torch.as_tensor, 0))
        yield
