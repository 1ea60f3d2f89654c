"""The tiny random encoder the prompt tests share (built once per module)."""

import pytest

from morl.agents.prompts.encoder import load_encoder


@pytest.fixture(scope="module")
def tiny():
    return load_encoder("tiny", seed=0)
