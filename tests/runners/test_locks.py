"""One writer per folder (runners/locks.py): the lock file holds its owner's pid, a second holder
is refused with one ``UserError`` line naming the folder, the owner's pid and what to do, and a
lock file nobody holds (left by a killed process) blocks no one."""

import fcntl
import os

import pytest

from morl.runners.errors import UserError
from morl.runners.locks import acquire, release

BUSY = "wait for it to finish or stop it first"


def test_a_second_holder_is_refused_with_one_line_naming_the_owner(tmp_path):
    # flock belongs to an open file: a second open, even in this process, is a second holder
    first = acquire(tmp_path / ".lock", "sweep 'grid'", BUSY)
    try:
        with pytest.raises(UserError) as exc:
            acquire(tmp_path / ".lock", "sweep 'grid'", BUSY)
        assert str(exc.value) == (
            f"sweep 'grid' is in use by another morl process (pid {os.getpid()}); wait for it to finish or stop it first"
        )
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"  # the refused one wrote nothing
    finally:
        release(first)


def test_a_holder_that_wrote_no_pid_is_named_unknown(tmp_path):
    with open(tmp_path / ".lock", "a+") as held:  # another program's lock, no pid in the file
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(UserError, match=r"^run directory 'r' is in use by another morl process \(pid unknown\); "):
            acquire(tmp_path / ".lock", "run directory 'r'", BUSY)


def test_a_released_lock_is_free_for_the_next_holder(tmp_path):
    handle = acquire(tmp_path / ".lock", "sweep 'grid'", BUSY)
    release(handle)
    assert handle.closed
    with open(tmp_path / ".lock", "a+") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if it were still held


@pytest.mark.parametrize("before", [None, "4242424\n"])  # no file; a killed process's file (its lock went)
def test_the_holder_writes_its_pid_over_any_stale_one(tmp_path, before):
    if before is not None:
        (tmp_path / ".lock").write_text(before)
    handle = acquire(tmp_path / ".lock", "sweep 'grid'", BUSY)
    try:
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
    finally:
        release(handle)


def test_a_folder_that_cannot_hold_the_lock_file_is_one_line(tmp_path):
    with pytest.raises(UserError) as exc:
        acquire(tmp_path / "missing" / ".lock", "sweep 'grid'", BUSY)
    assert str(exc.value) == "cannot lock sweep 'grid' (No such file or directory); it must be writable"
