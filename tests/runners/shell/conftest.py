"""The worked example of a new kind of run (docs/examples/new_kind.py), registered as the kind
``quadratic`` for the shell's tests (test_commands.py, test_loop.py)."""

import sys
from pathlib import Path

import pytest

from morl.runners.shell import kinds

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"


@pytest.fixture
def quadratic(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setitem(kinds.KINDS, "quadratic", "new_kind:QuadraticExperiment")
    from new_kind import QuadraticConfig, QuadraticExperiment

    def config(tmp_path, **changes):
        return QuadraticExperiment.load_config(None, [f"out_dir={tmp_path}", *(f"{k}={v}" for k, v in changes.items())])

    yield config
    sys.modules.pop("new_kind", None)
    assert QuadraticConfig  # imported for the reader: the schema is the config file's keys
