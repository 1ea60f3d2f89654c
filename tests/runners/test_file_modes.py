"""Run files (run.json, config.yaml, metrics, checkpoints) get the permissions the umask allows,
like any file the user's shell creates: 0644 under umask 022, 0600 under 077."""

import os
import stat
import sys
from pathlib import Path

import pytest

from morl.runners.shell import commands, kinds

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
FILES = ("run.json", "config.yaml", "metrics.jsonl", "final_metrics.json", "checkpoints/last.pt")


@pytest.fixture
def quadratic(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setitem(kinds.KINDS, "quadratic", "new_kind:QuadraticExperiment")
    from new_kind import QuadraticExperiment

    yield QuadraticExperiment
    sys.modules.pop("new_kind", None)


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_run_files_follow_the_umask(quadratic, tmp_path, umask, mode):
    cfg = quadratic.load_config(
        None, [f"out_dir={tmp_path}", "steps=4", "log_every=2", "eval_every=2", "checkpoint_every=2"]
    )
    old = os.umask(umask)
    try:
        run_dir = commands.start("quadratic", cfg, run_dir=tmp_path / "run", progress=False)
    finally:
        os.umask(old)
    modes = {name: stat.S_IMODE((run_dir / name).stat().st_mode) for name in FILES}
    assert modes == {name: mode for name in FILES}
