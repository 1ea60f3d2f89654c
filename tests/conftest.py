import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

# The test models are small: one intra-op thread is as fast as two on an idle 2-core CI
# machine and far faster on a busy one (thread oversubscription costs 20-30x here).
torch.set_num_threads(1)

# Mutation testing (tools/mutate.py sets MORL_FORK_SAFE_SOLVERS=1): mutmut runs the tests once
# in its own process, then forks one child per mutant. Clarabel's default LDL solver (faer)
# waits in the child on a rayon thread pool whose threads did not survive the fork: the test
# hangs and mutmut scores the hang as a kill (a timeout). Clarabel's QDLDL solver is
# single-threaded; the references it computes are the same optimum.
if os.environ.get("MORL_FORK_SAFE_SOLVERS"):
    import clarabel

    _ClarabelSettings = clarabel.DefaultSettings

    def _single_threaded_settings():
        settings = _ClarabelSettings()
        settings.direct_solve_method, settings.max_threads = "qdldl", 1
        return settings

    clarabel.DefaultSettings = _single_threaded_settings

# Seed audit (docs/testing.md): MORL_TEST_SEED_OFFSET=N shifts every seed the tests and the
# code under test give torch, numpy and random by N, so a test that passes only for the seed it
# hard-codes fails. Expected failures in this mode: values pinned for one seed on purpose
# (golden numbers, bitwise reproducibility against a stored run).
if int(os.environ.get("MORL_TEST_SEED_OFFSET", "0")):
    import random

    import numpy as np

    _OFFSET = int(os.environ["MORL_TEST_SEED_OFFSET"])

    class _OffsetGenerator(torch.Generator):
        def manual_seed(self, seed):
            return super().manual_seed(int(seed) + _OFFSET)

    _torch_manual_seed, _np_default_rng, _np_seed, _random_seed = (
        torch.manual_seed,
        np.random.default_rng,
        np.random.seed,
        random.seed,
    )
    torch.Generator = _OffsetGenerator
    torch.manual_seed = lambda seed: _torch_manual_seed(int(seed) + _OFFSET)
    np.random.default_rng = lambda seed=None, *a: _np_default_rng(None if seed is None else _offset_np(seed), *a)
    np.random.seed = lambda seed=None: _np_seed(None if seed is None else int(seed) + _OFFSET)
    random.seed = lambda seed=None, *a, **k: _random_seed(seed + _OFFSET if isinstance(seed, int) else seed, *a, **k)

    def _offset_np(seed):
        return int(seed) + _OFFSET if isinstance(seed, (int, np.integer)) else seed


# What libraries keep in $TMPDIR by design and may reuse across runs: kept where it was, not
# counted as litter. Ray (Flower's simulation backend) writes its session logs to $TMPDIR/ray and
# never deletes them: they go with this session's folder. Inductor (torch 2.13) keeps its
# precompiled C++ headers in $TMPDIR/torchinductor_<user>/precompiled_headers whatever
# TORCHINDUCTOR_CACHE_DIR says (checked: one CPU compile with both set): a cache by design, which
# goes with the folder too.
_TOLERATED = {"ray"}
_TOLERATED_PREFIXES = ("torchinductor_",)


@pytest.fixture(scope="session", autouse=True)
def _tests_leave_no_temp_files(tmp_path_factory):
    """Run the session with TMPDIR set to a folder of its own, and fail if anything is left in it.

    A per-session folder (not a before/after listing of /tmp) so that concurrent test runs and
    other programs writing to /tmp cannot trigger or hide a failure. Subprocesses (CLI tests)
    inherit TMPDIR. Tests write to their tmp_path; pytest's own tmp_path root and torch's
    compile cache stay in the real temp folder (fixed before the switch).
    """
    tmp_path_factory.getbasetemp()
    real = tempfile.gettempdir()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(real, f"torchinductor_{_user()}"))
    root = Path(tempfile.mkdtemp(prefix="morl-t-", dir=real))  # short: Ray's socket paths must fit 107 bytes
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"], tempfile.tempdir = str(root), str(root)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        tempfile.tempdir = None
        left = sorted(
            p.name for p in root.iterdir() if p.name not in _TOLERATED and not p.name.startswith(_TOLERATED_PREFIXES)
        )
        shutil.rmtree(root, ignore_errors=True)
    if left:
        pytest.fail(
            f"tests left {left} in $TMPDIR (removed); write to tmp_path, or configure the library "
            f"that made them (e.g. SB3-*: morl.agents.rl.sb3.folderless_logger)",
            pytrace=False,
        )


def _user() -> str:
    try:
        import getpass

        return getpass.getuser()
    except Exception:  # no user name (e.g. a container uid without passwd entry)
        return "unknown"


@pytest.fixture
def gen():
    """A seeded torch.Generator for reproducible random inputs: seed 0, or ``MORL_TEST_SEED``
    (to check that a test does not pass only for the seed it was written with)."""
    return torch.Generator().manual_seed(int(os.environ.get("MORL_TEST_SEED", "0")))
