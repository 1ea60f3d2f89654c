"""What a cell's run directory needs next, from the directory alone: its run.json status, its
checkpoint and whether a live process holds its lock."""

import fcntl
import json

import pytest

from morl.runners.sweep.run_state import next_action, owner_alive, stopped_on_purpose


def run_dir(tmp_path, status=None, checkpoint=False, lock_file=False):
    path = tmp_path / "cell"
    path.mkdir()
    if status is not None:
        (path / "run.json").write_text(json.dumps({"kind": "rl", "status": status}))
    if checkpoint:
        (path / "checkpoints").mkdir()
        (path / "checkpoints" / "last.pt").write_bytes(b"state")
    if lock_file:
        (path / ".lock").write_text("4242\n")  # left by a process that has ended: no lock held
    return path


@pytest.mark.parametrize(
    "status, checkpoint, expected",
    [
        (None, False, "start"),  # an empty directory
        ("running", False, "start"),  # killed before its first checkpoint
        ("failed", False, "start"),
        ("running", True, "resume"),  # what SIGKILL leaves behind
        ("failed", True, "resume"),
        ("interrupted", True, "resume"),
        (None, True, "resume"),  # a checkpoint without run.json
        ("finished", True, "done"),
        ("finished", False, "done"),
        ("diverged", True, "diverged"),  # the method's result: retrying repeats it
        ("diverged", False, "diverged"),
    ],
)
def test_a_run_directory_without_a_live_owner_needs_what_its_status_and_checkpoint_say(
    tmp_path, status, checkpoint, expected
):
    assert next_action(run_dir(tmp_path, status, checkpoint, lock_file=True)) == expected


def test_a_cell_without_a_run_directory_starts(tmp_path):
    assert next_action(tmp_path / "never-run") == "start"


def test_a_run_whose_lock_a_live_process_holds_is_busy_whatever_it_says(tmp_path):
    path = run_dir(tmp_path, "running", checkpoint=True, lock_file=True)
    assert not owner_alive(path)
    with open(path / ".lock", "a+") as held:  # an earlier sweep's run, still going
        fcntl.flock(held, fcntl.LOCK_EX)
        assert owner_alive(path) and next_action(path) == "busy"
    assert not owner_alive(path) and next_action(path) == "resume"  # the lock goes with its holder


def test_a_run_without_a_lock_file_has_no_owner(tmp_path):
    assert not owner_alive(run_dir(tmp_path, "running"))


@pytest.mark.parametrize(
    "status, expected",
    [("interrupted", True), ("running", False), ("failed", False), ("finished", False), (None, False)],
)
def test_only_an_interrupted_run_was_stopped_on_purpose(tmp_path, status, expected):
    # SIGINT/SIGTERM handled: "interrupted"; a crash or SIGKILL leaves "failed" or "running"
    assert stopped_on_purpose(run_dir(tmp_path, status, checkpoint=True)) is expected
