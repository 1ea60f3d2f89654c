"""``morl sweep`` end to end on real point-mass runs."""

import json
from pathlib import Path

import pytest
import yaml

from morl.runners import cli

ROOT = Path(__file__).resolve().parents[3]


QUICK = str(ROOT / "configs" / "quickstart_point_mass.yaml")


def write_spec(tmp_path: Path, **keys) -> Path:
    spec = {"name": "s", "out_dir": str(tmp_path / "out"), "base": QUICK, **keys}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def attempts(folder: Path, cell: str) -> list[str]:
    """``start``/``resume`` per attempt, from the log's header lines (written by the worker)."""
    lines = (folder / "logs" / f"{cell}.log").read_text().splitlines()
    return ["resume" if " morl resume " in line else "start" for line in lines if line.startswith("==== morl sweep ")]


# ----- real runs: `morl sweep` end to end ----------------------------------------------------
# tests/runners/test_resume.py's tiny point-mass settings; 120 steps leave the kill below a window of
# about a second between the first checkpoint (step 20) and the end.
TINY = {"aggregator.options": {}, "agent.hidden_sizes": [32, 32], "agent.batch_size": 64, "agent.buffer_capacity": 4000,
        "run.device": "cpu", "run.warmup_steps": 10, "run.log_every": 7, "run.eval_every": 25,
        "run.checkpoint_every": 20, "run.eval_episodes": 1}


def morl(*argv) -> int:
    return cli.main([str(a) for a in argv])


def logs(folder: Path) -> str:
    """Every cell's log, for the failure message of a real sweep."""
    return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in sorted((folder / "logs").glob("*.log")))


def real_spec(tmp_path: Path, out: str, seeds, total_steps: int, max_retries: int = 1) -> Path:
    spec = {"name": "agg", "out_dir": str(tmp_path / out), "base": QUICK, "grid": {"aggregator.name": ["mgda", "pcgrad"]},
            "seeds": seeds, "overrides": {**TINY, "run.total_steps": total_steps}, "max_retries": max_retries}
    path = tmp_path / f"{out}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


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
    assert err == [err[0]] and err[0].startswith("morl: error: cell nosuch: aggregator.name: unknown aggregator 'nosuch'")
    assert not (tmp_path / "out").exists()
    assert morl("sweep", spec, "--address", "auto") == 2
    assert "--address is for --engine ray" in capsys.readouterr().err


def test_dry_run_lists_the_cells_and_writes_nothing(tmp_path, capsys):
    spec = write_spec(tmp_path, grid={"aggregator.name": ["mgda", "pcgrad"]}, seeds=[0, 1], overrides={"aggregator.options": {}})
    assert morl("sweep", spec, "--dry-run") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[1:]] == [["mgda-s0", "start"], ["mgda-s1", "start"],
                                                         ["pcgrad-s0", "start"], ["pcgrad-s1", "start"]]
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
