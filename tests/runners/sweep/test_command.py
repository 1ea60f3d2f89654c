"""``morl sweep`` end to end on real point-mass runs."""

import json

import pytest
import yaml

from tests.runners.sweep.sweeps import attempts, logs, morl, real_spec, write_spec

# ----- real runs: `morl sweep` end to end ----------------------------------------------------
# tests/runners/test_resume.py's tiny point-mass settings; 120 steps leave the kill below a window of
# about a second between the first checkpoint (step 20) and the end.


@pytest.mark.integration  # trains in subprocesses
def test_a_real_sweep_runs_each_cell_into_its_run_directory(tmp_path, capsys):
    spec = real_spec(tmp_path, "out", [1], total_steps=30)
    folder = tmp_path / "out" / "agg"
    assert morl("sweep", spec, "--no-progress") == 0, logs(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert [c["name"] for c in manifest["cells"]] == ["mgda-s1", "pcgrad-s1"]
    for cell in manifest["cells"]:
        run_dir = folder / cell["run_dir"]
        assert json.loads((run_dir / "run.json").read_text())["status"] == "finished"
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert config["aggregator"]["name"] == cell["group"]["aggregator.name"] and config["run"]["seed"] == 1
        assert json.loads((run_dir / "final_metrics.json").read_text())["step"] == 30
    assert morl("sweep", spec, "--no-progress") == 0  # nothing left to do
    assert [attempts(folder, c) for c in ("mgda-s1", "pcgrad-s1")] == [["start"], ["start"]]
    assert "2 cells: 2 done" in capsys.readouterr().out


def test_a_bad_override_stops_the_sweep_with_one_line_and_writes_nothing(tmp_path, capsys):
    spec = write_spec(tmp_path, grid={"aggregator.name": ["mgda", "nosuch"]}, overrides={"aggregator.options": {}})
    assert morl("sweep", spec) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith(
        "morl: error: cell nosuch: aggregator.name: unknown aggregator 'nosuch'"
    )
    assert not (tmp_path / "out").exists()
    assert morl("sweep", spec, "--address", "auto") == 2
    assert "--address is for --engine ray" in capsys.readouterr().err


def test_dry_run_lists_the_cells_and_writes_nothing(tmp_path, capsys):
    spec = write_spec(
        tmp_path, grid={"aggregator.name": ["mgda", "pcgrad"]}, seeds=[0, 1], overrides={"aggregator.options": {}}
    )
    assert morl("sweep", spec, "--dry-run") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[1:]] == [
        ["mgda-s0", "start"],
        ["mgda-s1", "start"],
        ["pcgrad-s0", "start"],
        ["pcgrad-s1", "start"],
    ]
    assert not (tmp_path / "out").exists()


def test_a_second_driver_on_the_same_sweep_stops_with_one_line(tmp_path, capsys):
    import fcntl

    spec = write_spec(tmp_path, seeds=[1], overrides={"aggregator.options": {}})
    folder = tmp_path / "out" / "s"
    folder.mkdir(parents=True)
    with open(folder / ".lock", "a+") as held:  # another `morl sweep` driving it
        held.write("4242\n")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX)
        assert morl("sweep", spec) == 2
    assert "is in use by another morl process (pid 4242); wait for that morl sweep" in capsys.readouterr().err
    assert not (folder / "manifest.json").exists()
