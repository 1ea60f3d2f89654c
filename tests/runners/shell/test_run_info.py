"""``run.json`` (runners/shell/run_info.py): each write merges its fields into what is there, a
status outside the known ones is refused, and a missing or unreadable file reads as None."""

import json

import pytest

from morl.runners.shell import run_info
from morl.runners.shell.run_info import RUN_INFO, read_run_info, write_run_info


def test_each_write_merges_its_fields_and_keeps_the_first_writers_creation_and_argv(tmp_path, monkeypatch):
    times = iter(["T1", "T2", "T3"])
    monkeypatch.setattr(run_info.time, "strftime", lambda fmt: next(times))
    monkeypatch.setattr(run_info.sys, "argv", ["morl", "train", "a.yaml"])
    write_run_info(tmp_path, kind="rl", status="running", position=0, total=10)
    monkeypatch.setattr(run_info.sys, "argv", ["morl", "resume", str(tmp_path)])
    info = write_run_info(tmp_path, position=5)  # a checkpoint of the resumed run
    expected = {
        "created": "T1",
        "kind": "rl",
        "status": "running",
        "position": 5,
        "total": 10,
        "updated": "T3",
        "argv": ["train", "a.yaml"],
    }
    assert info == expected and json.loads((tmp_path / RUN_INFO).read_text()) == expected


def test_an_unknown_status_is_refused_and_nothing_is_written(tmp_path):
    with pytest.raises(ValueError, match="status must be one of running, finished, interrupted, diverged, failed"):
        write_run_info(tmp_path, status="done")
    assert not (tmp_path / RUN_INFO).exists()


@pytest.mark.parametrize("text", [None, "{not json", '["rl"]', ""])
def test_a_missing_or_unreadable_run_json_reads_as_none(tmp_path, text):
    if text is not None:
        (tmp_path / RUN_INFO).write_text(text)
    assert read_run_info(tmp_path) is None


def test_a_run_json_that_does_not_read_starts_over(tmp_path):
    (tmp_path / RUN_INFO).write_text("{not json")
    info = write_run_info(tmp_path, status="failed")
    assert info["status"] == "failed" and "created" in info and "kind" not in info
    assert read_run_info(tmp_path) == info
