"""Run directories (runners/run_dir.py): how they are named and created, one writer each, what a
failed start leaves behind, the checks of a directory given to ``eval``/``resume``, and the
refusal to resume after ``config.yaml`` was edited."""

import fcntl
import os
import re
import time
from types import SimpleNamespace

import pytest

from morl.runners import run_dir as rd
from morl.runners.checkpoint import atomic_torch_save
from morl.runners.errors import UserError


@pytest.fixture(autouse=True)
def own_state(monkeypatch):
    """This test's locks and created directories only, released at its end."""
    monkeypatch.setattr(rd, "_held_locks", {})
    monkeypatch.setattr(rd, "_created", [])
    yield
    rd.release_run_dirs()


def _error(call, *args) -> str:
    with pytest.raises(UserError) as exc:
        call(*args)
    return str(exc.value)


def _free(lock_file) -> bool:
    with open(lock_file, "a+") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


# ---- creating


def test_a_new_run_directory_is_name_dash_timestamp_and_never_an_existing_one(tmp_path, monkeypatch):
    stamp = time.struct_time((2024, 1, 31, 23, 59, 7, 2, 31, 0))
    monkeypatch.setattr(rd, "time", SimpleNamespace(strftime=lambda fmt: time.strftime(fmt, stamp)))
    made = [rd.new_run_dir(tmp_path / "runs", "mt10_cagrad.s-1") for _ in range(3)]
    assert [p.name for p in made] == [
        "mt10_cagrad.s-1-20240131-235907",
        "mt10_cagrad.s-1-20240131-235907.1",
        "mt10_cagrad.s-1-20240131-235907.2",
    ]
    for path in made:
        assert sorted(p.name for p in path.iterdir()) == [".lock", "checkpoints"]
        assert (path / ".lock").read_text() == f"{os.getpid()}\n" and not _free(path / ".lock")


@pytest.mark.parametrize("name", ["a b", "../up", "run/1", "", "é"])
def test_a_run_name_outside_letters_digits_dot_underscore_dash_is_refused_before_anything_is_made(tmp_path, name):
    assert _error(rd.new_run_dir, tmp_path / "runs", name) == (
        f"run name {name!r} may contain only letters, digits, '.', '_' and '-'"
    )
    assert not (tmp_path / "runs").exists()


def test_a_named_run_directory_may_be_new_or_an_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "a" / "b", tmp_path / "empty"):
        assert rd.named_run_dir(path) == path
        assert (path / "checkpoints").is_dir() and (path / ".lock").read_text() == f"{os.getpid()}\n"


@pytest.mark.parametrize("taken", ["folder with a file", "file"])
def test_a_named_run_directory_that_holds_something_is_refused_and_left_alone(tmp_path, taken):
    path = tmp_path / "run"
    if taken == "file":
        path.write_text("keep")
    else:
        path.mkdir()
        (path / "run.json").write_text("keep")
    message = _error(rd.named_run_dir, path)
    assert re.fullmatch(
        rf"--run-dir '{re.escape(str(path))}' already exists and is not an empty folder; "
        rf"continue it with `\S+ resume {re.escape(str(path))}` or choose a new path",
        message,
    )
    kept = path if taken == "file" else path / "run.json"
    assert kept.read_text() == "keep" and not (tmp_path / "run" / "checkpoints").exists()


def test_a_run_directory_that_cannot_be_created_is_one_line(tmp_path):
    (tmp_path / "a_file").write_text("x")
    assert _error(rd.named_run_dir, tmp_path / "a_file" / "run") == (
        f"cannot create the run directory '{tmp_path / 'a_file' / 'run'}' (Not a directory); choose a writable path"
    )


# ---- one writer


def test_a_run_directory_another_process_holds_is_refused_with_its_pid(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    with open(tmp_path / ".lock", "a+") as held:  # what a running `morl resume` holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        assert _error(rd.claim_run_dir, tmp_path) == (
            f"run directory '{tmp_path}' is in use by another morl process (pid 4242); "
            "wait for it to finish or stop it first"
        )


def test_claiming_a_run_directory_this_process_holds_is_a_no_op(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    rd.claim_run_dir(tmp_path)
    rd.claim_run_dir(tmp_path / "." / "checkpoints" / "..")  # the same folder, spelled otherwise
    assert not _free(tmp_path / ".lock")


def test_claiming_removes_the_temporaries_of_a_killed_checkpoint_write_only(tmp_path, capsys):
    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    for name in (".last.pt.abc123.tmp", ".step_000000020.pt.x.tmp", "last.pt", "step_000000020.pt"):
        (ckpt / name).write_bytes(b"x")
    rd.claim_run_dir(tmp_path)
    assert sorted(os.listdir(ckpt)) == ["last.pt", "step_000000020.pt"]
    assert "removed 2 temporary file(s)" in capsys.readouterr().err


def test_releasing_frees_the_locks(tmp_path):
    path = rd.named_run_dir(tmp_path / "run")
    rd.release_run_dirs()
    assert _free(path / ".lock")


def test_after_a_failure_only_created_directories_without_a_checkpoint_are_removed(tmp_path, capsys):
    kept_before = tmp_path / "theirs"  # claimed, not created by this process (a resumed run)
    (kept_before / "checkpoints").mkdir(parents=True)
    rd.claim_run_dir(kept_before)
    fresh = rd.named_run_dir(tmp_path / "fresh")
    saved = rd.named_run_dir(tmp_path / "saved")
    (saved / "checkpoints" / "last.pt").write_bytes(b"a checkpoint")
    rd.release_run_dirs(failed=True)
    assert (not fresh.exists(), saved.is_dir(), kept_before.is_dir()) == (True, True, True)
    assert capsys.readouterr().err.splitlines() == [f"morl: removed the unfinished run directory {fresh}"]


def test_without_a_failure_every_created_directory_stays(tmp_path):
    fresh = rd.named_run_dir(tmp_path / "fresh")
    rd.release_run_dirs(failed=False)
    rd.release_run_dirs(failed=True)  # the list of created directories was cleared: nothing to remove
    assert fresh.is_dir()


# ---- directories given to eval / resume


def test_an_existing_run_directory_needs_its_config(tmp_path):
    (tmp_path / "run").mkdir()
    assert (
        _error(rd.existing_run_dir, tmp_path / "run")
        == f"'{tmp_path / 'run'}' is not a morl run directory (no config.yaml)"
    )
    (tmp_path / "run" / "config.yaml").write_text("seed: 0\n")
    assert rd.existing_run_dir(str(tmp_path / "run")) == tmp_path / "run"


def test_a_missing_path_or_a_file_is_not_a_run_directory(tmp_path):
    assert _error(rd.existing_run_dir, tmp_path / "nope") == f"run directory '{tmp_path / 'nope'}' does not exist"
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    assert _error(rd.existing_run_dir, tmp_path / "config.yaml") == (
        f"'{tmp_path / 'config.yaml'}' is a file; give a run directory (the folder holding config.yaml and run.json)"
    )


def test_the_last_checkpoint_is_checkpoints_last_pt(tmp_path):
    assert _error(rd.last_checkpoint, tmp_path) == (
        f"run directory '{tmp_path}' has no checkpoint yet (checkpoints/last.pt)"
    )
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"x")
    assert rd.last_checkpoint(tmp_path) == tmp_path / "checkpoints" / "last.pt"


# ---- resuming after an edit


STORED = {"agent": {"lr": 0.1, "hidden": [8, 8]}, "run": {"steps": 10, "seed": 0}}


def _run(tmp_path, text: str):
    (tmp_path / "config.yaml").write_text(text)
    return tmp_path


def test_an_edited_config_is_refused_naming_the_first_changed_key(tmp_path):
    run = _run(tmp_path, "agent:\n  lr: 0.5\n  hidden: [8, 8]\nrun:\n  steps: 20\n  seed: 0\n")
    config = {"agent": {"lr": 0.5, "hidden": [8, 8]}, "run": {"steps": 20, "seed": 0}}
    assert _error(rd.check_config_unchanged, run, config, [], STORED) == (
        f"{run / 'config.yaml'} was edited since the last checkpoint (agent.lr: 0.1 -> 0.5); "
        "undo the edit, or pass agent.lr=... on the command line if the change is intended and allowed"
    )
    # the first key given on the command line is accepted; the next edit is named
    assert "(run.steps: 10 -> 20)" in _error(rd.check_config_unchanged, run, config, ["agent.lr=0.5"], STORED)
    rd.check_config_unchanged(run, config, ["agent.lr=0.5", " run.steps =20"], STORED)


def test_an_unchanged_config_and_a_run_without_a_stored_config_pass(tmp_path):
    run = _run(tmp_path, "agent: {lr: 0.1, hidden: [8, 8]}\nrun: {steps: 10, seed: 0}\n")
    rd.check_config_unchanged(run, STORED, [], STORED)
    (run / "checkpoints").mkdir()
    atomic_torch_save({"step": 5}, run / "checkpoints" / "last.pt")  # written before checkpoints kept the config
    rd.check_config_unchanged(run, {"anything": 1}, [])


def test_a_setting_newer_than_the_run_passes_unless_the_file_writes_it(tmp_path):
    config = {**STORED, "run": {**STORED["run"], "noise": 0.2}}  # morl added run.noise, default 0.2
    run = _run(tmp_path, "agent: {lr: 0.1, hidden: [8, 8]}\nrun: {steps: 10, seed: 0}\n")
    rd.check_config_unchanged(run, config, [], STORED)
    run = _run(tmp_path, "agent: {lr: 0.1, hidden: [8, 8]}\nrun: {steps: 10, seed: 0, noise: 0.2}\n")
    assert "(run.noise: None -> 0.2)" in _error(rd.check_config_unchanged, run, config, [], STORED)


def test_the_stored_config_is_read_from_the_last_checkpoint(tmp_path):
    run = _run(tmp_path, "agent: {lr: 0.1, hidden: [8, 8]}\nrun: {steps: 10, seed: 0}\n")
    (run / "checkpoints").mkdir()
    atomic_torch_save({"step": 5, "config": STORED}, run / "checkpoints" / "last.pt")
    rd.check_config_unchanged(run, STORED, [])
    edited = {**STORED, "run": {"steps": 10, "seed": 1}}
    assert "(run.seed: 0 -> 1)" in _error(rd.check_config_unchanged, run, edited, [])


def test_a_free_form_option_removed_from_the_config_is_an_edit(tmp_path):
    stored = {"aggregator": {"name": "cagrad", "options": {"c": 0.5}}}
    run = _run(tmp_path, "aggregator: {name: cagrad, options: {}}\n")
    message = _error(rd.check_config_unchanged, run, {"aggregator": {"name": "cagrad", "options": {}}}, [], stored)
    assert message.startswith(
        f"{run / 'config.yaml'} was edited since the last checkpoint (aggregator.options.c: 0.5 -> None); "
    )


# ---- metrics after the restart point


def test_records_after_the_restart_step_are_dropped_and_the_rest_kept_verbatim(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step": 10, "kind": "train"}\n'
        '{"kind": "note"}\n'
        "\n"
        '{"step": 20, "kind": "eval", "x": [1, 2]}\n'
        '{"step": 21, "kind": "train"}\n'
        '{"step": 30, "kind": "eval"}\n'
    )
    rd.drop_records_after(path, 20)
    assert path.read_text() == (
        '{"step": 10, "kind": "train"}\n{"kind": "note"}\n{"step": 20, "kind": "eval", "x": [1, 2]}\n'
    )


def test_dropping_records_of_a_run_without_metrics_writes_nothing(tmp_path):
    rd.drop_records_after(tmp_path / "metrics.jsonl", 5)
    assert not (tmp_path / "metrics.jsonl").exists()
