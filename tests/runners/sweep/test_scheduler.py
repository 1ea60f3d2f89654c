"""The sweep scheduler's contract, with a stand-in run (fake_run.py): each cell run to an end once,
retries, kills, signals and runs owned by an earlier sweep."""

import json
import os
import signal
import threading
import time

import pytest

from tests.runners.sweep.sweeps import attempts, fake_sweep, kill_when_checkpointed, run_status


# ----- the scheduler, with the stand-in run --------------------------------------------------
def test_every_cell_runs_once_and_a_rerun_runs_nothing(tmp_path):
    folder, cells, run = fake_sweep(tmp_path, grid={"aggregator.name": ["mgda", "pcgrad"]}, seeds=[1, 2, 3])
    assert run() == 0
    for cell in cells:
        assert run_status(folder, cell.name) == "finished" and attempts(folder, cell.name) == ["start"]
    assert json.loads((folder / "mgda-s2" / "final_metrics.json").read_text())["seed"] == "2"
    status = json.loads((folder / "status.json").read_text())
    assert status["counts"] == {"done": 6}
    assert run() == 0
    assert all(attempts(folder, c.name) == ["start"] for c in cells)  # finished: skipped


def test_a_failing_cell_is_retried_max_retries_times_then_reported(tmp_path, capsys):
    folder, cells, run = fake_sweep(tmp_path, list=[{"fail": 0}, {"fail": 1}], max_retries=2)
    assert run() == 1
    assert attempts(folder, "fail1") == ["start"] * 3 and attempts(folder, "fail0") == ["start"]
    status = json.loads((folder / "status.json").read_text())
    assert status["cells"]["fail1"]["status"] == "failed" and status["cells"]["fail0"]["status"] == "done"
    assert [a["exit_status"] for a in status["cells"]["fail1"]["attempts"]] == [2, 2, 2]
    assert not (folder / "fail1").exists()  # a failed start leaves nothing half-written


def test_a_diverged_run_is_a_result_not_retried(tmp_path):
    folder, cells, run = fake_sweep(tmp_path, list=[{"diverge": 1}], max_retries=3)
    assert run() == 0
    assert attempts(folder, "diverge1") == ["start"] and run_status(folder, "diverge1") == "diverged"
    assert run() == 0 and attempts(folder, "diverge1") == ["start"]


@pytest.mark.integration  # kills a run and resumes it
def test_a_run_killed_mid_sweep_resumes_on_the_rerun_and_nothing_runs_twice(tmp_path):
    folder, cells, run = fake_sweep(
        tmp_path,
        grid={"aggregator.name": ["mgda", "pcgrad"]},
        seeds=[1, 2, 3],
        overrides={"steps": 40, "sleep": 0.02},
        max_retries=0,
    )
    killer = threading.Thread(target=kill_when_checkpointed, args=(folder / "pcgrad-s1",))
    killer.start()
    assert run() == 1  # no retries: the killed cell is reported failed
    killer.join()
    assert run_status(folder, "pcgrad-s1") == "running"  # what SIGKILL leaves behind
    assert run() == 0
    for cell in cells:
        expected = ["start", "resume"] if cell.name == "pcgrad-s1" else ["start"]
        assert attempts(folder, cell.name) == expected and run_status(folder, cell.name) == "finished"
    status = json.loads((folder / "status.json").read_text())["cells"]["pcgrad-s1"]["attempts"]
    assert [(a["action"], a["exit_status"]) for a in status] == [("start", -9), ("resume", 0)]


@pytest.mark.integration  # kills a run and resumes it
def test_a_killed_run_is_resumed_within_the_same_sweep_when_retries_allow(tmp_path):
    folder, cells, run = fake_sweep(tmp_path, seeds=[1, 2], overrides={"steps": 40, "sleep": 0.02}, max_retries=1)
    killer = threading.Thread(target=kill_when_checkpointed, args=(folder / "s2",))
    killer.start()
    assert run() == 0
    killer.join()
    assert attempts(folder, "s2") == ["start", "resume"] and attempts(folder, "s1") == ["start"]


@pytest.mark.integration  # signals to subprocesses, then resume
def test_a_run_stopped_by_a_signal_of_its_own_is_not_retried_and_resumes_on_the_rerun(tmp_path, capsys):
    """``kill -TERM <pid of one run>``: the run checkpoints and records "interrupted"; the sweep
    finishes the other cells, does not restart that one (retries are for crashes), exits 130
    and the next sweep resumes it."""
    folder, cells, run = fake_sweep(tmp_path, seeds=[1, 2], overrides={"steps": 40, "sleep": 0.02}, max_retries=2)
    killer = threading.Thread(target=kill_when_checkpointed, args=(folder / "s2",), kwargs={"sig": signal.SIGTERM})
    killer.start()
    assert run() == 130
    killer.join()
    assert attempts(folder, "s2") == ["start"] and run_status(folder, "s2") == "interrupted"
    assert run_status(folder, "s1") == "finished"
    assert json.loads((folder / "status.json").read_text())["counts"] == {"done": 1, "interrupted": 1}
    assert (
        "s2 stopped by a signal to its run (exit status 130); the next morl sweep resumes it" in capsys.readouterr().err
    )
    assert run() == 0
    assert attempts(folder, "s2") == ["start", "resume"] and run_status(folder, "s2") == "finished"


@pytest.mark.integration  # signals to subprocesses, then resume
def test_stopping_the_sweep_checkpoints_every_run_and_the_rerun_resumes_them(tmp_path):
    folder, cells, run = fake_sweep(tmp_path, seeds=[1, 2, 3], overrides={"steps": 60, "sleep": 0.02})

    def ctrl_c_once_both_run():
        while not all((folder / f"s{i}" / "checkpoints" / "last.pt").is_file() for i in (1, 2)):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C at the terminal does to the driver

    threading.Thread(target=ctrl_c_once_both_run).start()
    assert run(max_parallel=2) == 130
    assert [run_status(folder, f"s{i}") for i in (1, 2)] == ["interrupted"] * 2
    assert not (folder / "s3").exists() and not (folder / ".stop").exists()
    assert json.loads((folder / "status.json").read_text())["counts"] == {"interrupted": 2, "pending": 1}
    assert run() == 0
    assert [attempts(folder, f"s{i}") for i in (1, 2, 3)] == [["start", "resume"], ["start", "resume"], ["start"]]


@pytest.mark.integration  # waits on a second process
def test_a_run_still_owned_by_an_earlier_sweeps_process_is_waited_for(tmp_path):
    import fcntl

    folder, cells, run = fake_sweep(tmp_path, seeds=[1])
    (folder / "s1").mkdir()
    handle = open(folder / "s1" / ".lock", "a+")
    fcntl.flock(handle, fcntl.LOCK_EX)  # an orphaned run from a killed sweep, still working

    def orphan_ends():
        time.sleep(1.0)
        (folder / "s1" / "run.json").write_text(json.dumps({"status": "finished"}))
        handle.close()

    threading.Thread(target=orphan_ends).start()
    assert run() == 0
    assert not (folder / "logs" / "s1.log").exists()  # never started by this sweep


@pytest.mark.integration  # waits on a second process
def test_a_run_owned_by_an_earlier_process_takes_a_slot(tmp_path):
    # two MT10 runs started by hand plus a sweep at --max-parallel 2 must not make four processes
    import fcntl

    folder, cells, run = fake_sweep(tmp_path, seeds=[2, 1])  # the busy cell last: all are looked at first
    (folder / "s1").mkdir()
    handle = open(folder / "s1" / ".lock", "a+")
    fcntl.flock(handle, fcntl.LOCK_EX)
    released = []

    def orphan_ends():
        time.sleep(1.5)
        (folder / "s1" / "run.json").write_text(json.dumps({"status": "finished"}))
        released.append(time.time())
        handle.close()

    threading.Thread(target=orphan_ends).start()
    assert run(max_parallel=1) == 0
    started = json.loads((folder / "status.json").read_text())["cells"]["s2"]["attempts"][0]["started"]
    started = time.mktime(time.strptime(started, "%Y-%m-%dT%H:%M:%S%z"))  # whole seconds
    assert started >= int(released[0])  # s2 waited for s1's slot (it would start ~1.5 s before)
    assert not (folder / "logs" / "s1.log").exists()
