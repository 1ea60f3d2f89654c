import os

import pytest
import torch

# CI has 2 cores; intra-op threads beyond that only add contention.
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture
def gen():
    """A seeded torch.Generator for reproducible random inputs."""
    return torch.Generator().manual_seed(0)
