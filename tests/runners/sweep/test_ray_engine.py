"""The Ray engine retries, stops and skips like the local one, and gives bitwise the same runs."""

import json
import os
import signal
import threading
import time

import pytest

from morl.runners.sweep.cells import expand
from morl.runners.sweep.manifest import sweep_dir, write_manifest
from morl.runners.sweep.scheduler import Scheduler
from morl.runners.sweep.spec import load_spec
from tests.runners.sweep.sweeps import FAKE, attempts, kill_when_checkpointed, morl, real_spec, run_status, write_spec

pytestmark = pytest.mark.integration  # Ray starts a cluster on this machine


# ----- real runs: `morl sweep` end to end ----------------------------------------------------
# tests/runners/test_resume.py's tiny point-mass settings; 120 steps leave the kill below a window of
# about a second between the first checkpoint (step 20) and the end.


def test_local_with_a_killed_run_and_ray_give_bitwise_equal_runs(tmp_path):
    """2 aggregators x 3 seeds: local, one run SIGKILLed half-way and resumed by the re-run;
    then the same sweep on a local Ray instance; every run's final state is bitwise the same."""
    from morl.runners.checkpoint import torch_load
    from tests.state_equality import assert_state_equal

    local = real_spec(tmp_path, "local", [1, 2, 3], total_steps=120, max_retries=0)
    folder = tmp_path / "local" / "agg"
    killer = threading.Thread(target=kill_when_checkpointed, args=(folder / "pcgrad-s2", 300.0))
    killer.start()
    assert morl("sweep", local, "--no-progress") == 1  # the killed run, reported (no retries)
    killer.join()
    assert morl("sweep", local, "--no-progress") == 0
    assert attempts(folder, "pcgrad-s2") == ["start", "resume"]
    assert (
        morl("sweep", real_spec(tmp_path, "ray", [1, 2, 3], total_steps=120), "--engine", "ray", "--no-progress") == 0
    )
    # the killed and resumed cell last: its training state first, then its evaluation state
    names = ["mgda-s1", "mgda-s2", "mgda-s3", "pcgrad-s1", "pcgrad-s3", "pcgrad-s2"]
    for name in names:
        a, b = folder / name, tmp_path / "ray" / "agg" / name
        assert attempts(b.parent, name) == ["start"] and (name == "pcgrad-s2" or attempts(folder, name) == ["start"])
        sa, sb = torch_load(a / "checkpoints" / "last.pt"), torch_load(b / "checkpoints" / "last.pt")
        assert sa["step"] == sb["step"] == 120
        for key in ("agent", "replay", "env", "rng", "eval_env", "stats"):
            assert_state_equal(sa[key], sb[key], f"{name}.{key}")
        fa, fb = (json.loads((d / "final_metrics.json").read_text()) for d in (a, b))
        assert fa.pop("train_seconds") and fb.pop("train_seconds")  # measured, so they differ
        assert fa == fb


def test_the_ray_engine_retries_stops_and_skips_like_the_local_one(tmp_path):
    """The stand-in run on a local Ray instance (20 s here, mostly Ray's start-up): a failing cell is
    retried, a stop request reaches the runs inside Ray tasks, the re-run resumes them."""
    from morl.runners.sweep.ray_engine import RayEngine

    spec = load_spec(
        write_spec(
            tmp_path,
            list=[{"fail": 0}, {"fail": 1}],
            seeds=[1, 2],
            max_retries=1,
            overrides={"steps": 60, "sleep": 0.02},
        )
    )
    cells, folder = expand(spec), sweep_dir(spec)
    write_manifest(folder, spec, cells)
    engine = RayEngine(None, 1, 0)
    try:

        def run():
            return Scheduler(folder, cells, engine, max_retries=1, threads=1, program=FAKE, progress=False).run()

        def stop_once_running():
            while not (folder / "fail0-s1" / "checkpoints" / "last.pt").is_file():
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=stop_once_running).start()
        assert run() == 130
        assert run_status(folder, "fail0-s1") == "interrupted"
        assert run() == 1  # fail1-* fail twice each
        assert attempts(folder, "fail0-s1") == ["start", "resume"] and attempts(folder, "fail0-s2")[0] == "start"
        assert run_status(folder, "fail0-s2") == "finished" and attempts(folder, "fail1-s1").count("start") >= 2
        assert run() == 1 and attempts(folder, "fail0-s1") == ["start", "resume"]  # finished: skipped
    finally:
        engine.close()
