"""``reads_are_free`` (morl/host_reads.py): only a CPU tensor outside ``torch.compile`` may be read
to stop a solver early; ``meta`` stands in for an accelerator."""

import torch

from morl.host_reads import reads_are_free


def test_only_cpu_tensors_outside_compile_are_free_to_read():
    assert reads_are_free(torch.zeros(2))
    assert not reads_are_free(torch.zeros(2, device="meta"))


def test_under_torch_compile_even_a_cpu_read_is_not_free():
    @torch.compile(fullgraph=True, backend="eager")
    def flag(t):
        return t + 1 if reads_are_free(t) else t - 1

    assert torch.equal(flag(torch.zeros(2)), -torch.ones(2))
