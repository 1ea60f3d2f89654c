"""``resolve_device`` (runners/device.py): ``auto`` picks CUDA only when it is available; any other
name must be a valid device of a supported type that is present, else one ``UserError`` line
naming what is allowed. This machine has no GPU: CUDA's presence is set by hand where it matters."""

import pytest
import torch

from morl.runners.device import resolve_device
from morl.runners.errors import UserError


@pytest.mark.parametrize("cuda, expected", [(False, "cpu"), (True, "cuda")])
def test_auto_is_cuda_exactly_when_cuda_is_available(monkeypatch, cuda, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert resolve_device("auto") == torch.device(expected)


@pytest.mark.parametrize("name", ["cpu", "cpu:0"])
def test_cpu_is_taken_as_given(monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device = resolve_device(name)
    assert (device.type, str(device)) == ("cpu", name)


def test_a_cuda_device_is_accepted_when_cuda_is_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


def test_a_cuda_index_past_the_machines_gpus_is_one_line_naming_the_present_ones(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(UserError) as exc:
        resolve_device("cuda:2")
    assert str(exc.value) == "device 'cuda:2' requested but this machine has 2 CUDA device(s): cuda:0 to cuda:1"


@pytest.mark.parametrize("name", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_one_line_pointing_to_cpu_or_auto(monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError) as exc:
        resolve_device(name)
    assert str(exc.value) == f"device '{name}' requested but CUDA is not available; use device=cpu or device=auto"


def test_a_name_torch_does_not_know_is_not_valid():
    with pytest.raises(UserError) as exc:
        resolve_device("gpu0")
    assert str(exc.value) == "device 'gpu0' is not valid; allowed: auto, cpu, cuda, cuda:N"


@pytest.mark.parametrize("name", ["meta", "mps"])
def test_a_torch_device_type_other_than_cpu_and_cuda_is_not_supported(name):
    with pytest.raises(UserError) as exc:
        resolve_device(name)
    assert str(exc.value) == f"device '{name}' is not supported; allowed: auto, cpu, cuda, cuda:N"
