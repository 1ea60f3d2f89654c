import pytest
import torch

# The test models are small: one intra-op thread is as fast as two on an idle 2-core CI
# machine and far faster on a busy one (thread oversubscription costs 20-30x here).
torch.set_num_threads(1)


@pytest.fixture
def gen():
    """A seeded torch.Generator for reproducible random inputs."""
    return torch.Generator().manual_seed(0)
