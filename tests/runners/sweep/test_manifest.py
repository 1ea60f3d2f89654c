"""The sweep directory's manifest.json (the spec and every cell, checked against an earlier run of
the sweep) and its lock (one driver at a time)."""

import fcntl
import json
import os
from pathlib import Path

import pytest

from morl.runners.errors import UserError
from morl.runners.sweep.cells import expand
from morl.runners.sweep.manifest import (
    check_manifest,
    claim_sweep,
    read_manifest,
    release_sweep,
    sweep_dir,
    write_manifest,
)
from morl.runners.sweep.spec import load_spec
from tests.runners.sweep.sweeps import QUICK, fake_sweep, write_spec


def test_a_rerun_may_add_cells_but_not_change_one(tmp_path):
    folder, cells, _ = fake_sweep(tmp_path, seeds=[1])
    manifest = read_manifest(folder)
    assert [c["name"] for c in manifest["cells"]] == ["s1"] and manifest["cells"][0]["run_dir"] == "s1"
    spec = load_spec(write_spec(tmp_path, seeds=[1, 2]))
    write_manifest(folder, spec, expand(spec))  # more seeds: fine
    spec = load_spec(write_spec(tmp_path, seeds=[1, 2], overrides={"run.total_steps": 9}))
    with pytest.raises(UserError, match="cell 's1' of .* ran `train quickstart_point_mass.yaml run.seed=1`"):
        write_manifest(folder, spec, expand(spec))


def test_the_manifest_is_the_spec_and_every_cell_in_json_under_out_dir_and_name(tmp_path):
    spec = load_spec(write_spec(tmp_path, seeds=[1], max_retries=2))
    folder = sweep_dir(spec)
    assert folder == tmp_path / "out" / "s"
    assert read_manifest(folder) is None  # no sweep there yet
    path = write_manifest(folder, spec, expand(spec))
    assert path == tmp_path / "out" / "s" / "manifest.json"
    text = path.read_text()
    assert text.endswith("}\n") and text.startswith('{\n  "name": "s",\n')  # indented, one newline at the end
    assert json.loads(text) == {
        "name": "s",
        "spec": {
            "name": "s",
            "out_dir": str(tmp_path / "out"),
            "base": [QUICK],
            "command": None,
            "grid": {},
            "list": [],
            "seeds": [1],
            "overrides": {},
            "resources": {"cpus": 1, "gpus": 0.0},
            "max_retries": 2,
        },
        "cells": [
            {
                "name": "s1",
                "command": "train",
                "config": QUICK,
                "overrides": ["run.seed=1"],
                "group": {},
                "seed": 1,
                "run_dir": "s1",
            }
        ],
    }
    assert read_manifest(folder) == json.loads(text)


def test_a_cell_the_spec_no_longer_has_stops_with_one_line(tmp_path):
    folder, _, _ = fake_sweep(tmp_path, seeds=[1, 2])
    spec = load_spec(write_spec(tmp_path, seeds=[1]))
    with pytest.raises(UserError, match=f"the spec no longer has cell 's2' that {folder} holds"):
        check_manifest(folder, expand(spec))
    check_manifest(folder, expand(load_spec(write_spec(tmp_path, seeds=[2, 1]))))  # the same cells: fine


def test_a_config_moved_to_another_folder_is_shown_by_its_full_paths(tmp_path):
    # a sweep started from another directory: the same file name, another path
    folder, cells, _ = fake_sweep(tmp_path, seeds=[1])
    manifest = read_manifest(folder)
    manifest["cells"][0]["config"] = "/elsewhere/quickstart_point_mass.yaml"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError) as caught:
        check_manifest(folder, cells)
    assert (
        f"cell 's1' of {folder} ran `train /elsewhere/quickstart_point_mass.yaml run.seed=1`, "
        f"the spec now gives `train {QUICK} run.seed=1`" in str(caught.value)
    )


def test_a_manifest_that_is_not_json_stops_with_one_line(tmp_path):
    (tmp_path / "manifest.json").write_text('{"name": "s", "cells": [')
    with pytest.raises(UserError, match="manifest.json is not valid JSON; restore it or remove the sweep directory"):
        read_manifest(tmp_path)


def test_a_sweep_directory_is_claimed_once_per_process_until_released(tmp_path):
    folder = tmp_path / "out" / "s"
    claim_sweep(folder)  # creates the folder
    try:
        claim_sweep(folder)  # the same driver again: no error
        assert (folder / ".lock").read_text() == f"{os.getpid()}\n"
        with open(folder / ".lock") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a second driver meets
    finally:
        release_sweep(folder)
    with open(folder / ".lock") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
    release_sweep(folder)  # twice: nothing held, nothing to do


def test_a_sweep_directory_that_cannot_be_created_stops_with_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    folder = Path(tmp_path / "file" / "s")  # below a file
    with pytest.raises(UserError, match="cannot create the sweep directory .*; set a writable out_dir"):
        claim_sweep(folder)
    spec = load_spec(write_spec(tmp_path, out_dir=str(tmp_path / "file"), seeds=[1]))
    with pytest.raises(UserError, match="cannot create the sweep directory .*; set a writable out_dir"):
        write_manifest(sweep_dir(spec), spec, expand(spec))
