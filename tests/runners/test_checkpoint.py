"""Checkpoints and run directories as files from elsewhere: data, never code; bad ones get one line.

Each case checks the exit status, that the terminal shows exactly one ``morl: error:`` line and
no traceback, and that every checkpoint already in the run directory is byte-identical after.
"""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from morl.runners.checkpoint import atomic_torch_save, from_safe, to_safe, torch_load
from morl.runners.cli import main as morl

ROOT = Path(__file__).resolve().parents[2]
QUICK = str(ROOT / "configs" / "quickstart_point_mass.yaml")
TINY = [
    "agent.hidden_sizes=[16,16]",
    "agent.batch_size=32",
    "agent.buffer_capacity=2000",
    "run.device=cpu",
    "run.warmup_steps=10",
    "run.log_every=10",
    "run.eval_every=20",
    "run.checkpoint_every=20",
    "run.eval_episodes=1",
    "aggregator.name=mean",
    "aggregator.options={}",
]


class Exploit:
    """A pickle that would create a marker file when unpickled by an unrestricted loader."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A finished 40-step point-mass run with last.pt, last.prev.pt and step snapshots."""
    out = tmp_path_factory.mktemp("runs")
    assert morl(["train", QUICK, *TINY, "run.total_steps=40", f"run.out_dir={out}", "run.name=safe"]) == 0
    (path,) = out.iterdir()
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    err = [line for line in captured.err.strip().splitlines() if line.startswith("morl: error: ")]
    assert len(err) == 1, captured.err
    return err[0]


def test_numpy_states_round_trip_through_the_safe_format(tmp_path):
    rng = np.random.default_rng(7)
    rng.random(3)
    state = {
        "np": np.random.get_state(),
        "pcg": rng.bit_generator.state,
        "arr": np.arange(6, dtype=np.float32).reshape(2, 3),
        "scalar": np.int64(5),
        "nested": [(1, np.uint32(3)), {"t": torch.ones(2)}],
    }
    atomic_torch_save(state, tmp_path / "s.pt")
    back = torch_load(tmp_path / "s.pt")
    restored = np.random.default_rng(0)
    restored.bit_generator.state = back["pcg"]
    assert restored.random() == rng.random()  # the generator continues exactly where it was
    np.random.set_state(back["np"])
    assert back["arr"].dtype == np.float32 and np.array_equal(back["arr"], state["arr"])
    assert type(back["scalar"]) is np.int64 and back["nested"][0][1] == 3 and type(back["nested"][0]) is tuple
    assert from_safe(to_safe(state))["np"][1].dtype == np.uint32


@pytest.mark.parametrize("command", ["resume", "eval"])
def test_a_malicious_checkpoint_is_refused_and_nothing_runs(run_dir, tmp_path, command, capsys):
    evil = tmp_path / command
    evil.mkdir()
    for name in ("config.yaml",):
        (evil / name).write_bytes((run_dir / name).read_bytes())
    (evil / "checkpoints").mkdir()
    marker = tmp_path / "pwned"
    torch.save(
        {"agent": Exploit(marker)}, evil / "checkpoints" / "last.pt"
    )  # a real torch zip with a code-running pickle
    before = _snapshot(evil)
    assert morl([command, str(evil)]) == 2
    line = _one_error_line(capsys)
    assert "last.pt" in line and "refused" in line
    assert not marker.exists()
    assert _snapshot(evil) == before


@pytest.mark.integration  # a subprocess
def test_a_malicious_checkpoint_runs_nothing_in_a_subprocess_either(run_dir, tmp_path):
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "config.yaml").write_bytes((run_dir / "config.yaml").read_bytes())
    (evil / "checkpoints").mkdir()
    marker = tmp_path / "pwned"
    with open(evil / "checkpoints" / "last.pt", "wb") as fh:
        pickle.dump(Exploit(marker), fh)  # a plain (legacy-format) pickle
    proc = subprocess.run(
        [sys.executable, "-m", "morl.runners.cli", "resume", str(evil)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("morl: error: ")
    assert not marker.exists()


def _copy_run(src: Path, dst: Path) -> Path:
    for p in src.rglob("*"):
        if p.is_file() and p.name != ".lock":
            (dst / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (dst / p.relative_to(src)).write_bytes(p.read_bytes())
    return dst


@pytest.mark.parametrize("damage", ["empty", "truncated", "foreign"])
def test_a_damaged_last_pt_without_predecessor_gives_one_line(run_dir, tmp_path, damage, capsys):
    run = _copy_run(run_dir, tmp_path / "run")
    last = run / "checkpoints" / "last.pt"
    (run / "checkpoints" / "last.prev.pt").unlink()
    data = last.read_bytes()
    last.write_bytes(
        {"empty": b"", "truncated": data[: len(data) // 2], "foreign": b"PK\x03\x04 not a checkpoint"}[damage]
    )
    before = _snapshot(run)
    for command in ("resume", "eval"):
        assert morl([command, str(run)]) == 2
        assert "last.pt" in _one_error_line(capsys)
        assert _snapshot(run) == before


def test_a_truncated_last_pt_falls_back_to_the_previous_checkpoint(run_dir, tmp_path, capsys):
    run = _copy_run(run_dir, tmp_path / "run")
    last = run / "checkpoints" / "last.pt"
    previous_step = torch_load(run / "checkpoints" / "last.prev.pt")["step"]
    assert previous_step < torch_load(last)["step"]  # the predecessor is an older full checkpoint
    last.write_bytes(last.read_bytes()[:1000])
    assert morl(["eval", str(run)]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "last.prev.pt" in err
    assert (run / "eval" / f"step_{previous_step:09d}.json").is_file()


def test_orphan_temporaries_of_a_killed_write_are_removed_at_resume(run_dir, tmp_path, capsys):
    run = _copy_run(run_dir, tmp_path / "run")
    orphan = run / "checkpoints" / ".last.pt.abc123.tmp"
    orphan.write_bytes(b"x" * 1000)
    assert morl(["resume", str(run), "run.total_steps=50"]) == 0
    assert not orphan.exists()
    assert "removed 1 temporary file" in capsys.readouterr().err


def test_an_edited_config_is_refused_on_resume_unless_given_as_an_override(run_dir, tmp_path, capsys):
    run = _copy_run(run_dir, tmp_path / "run")
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("total_steps: 40", "total_steps: 60"))
    before = _snapshot(run)
    assert morl(["resume", str(run)]) == 2
    line = _one_error_line(capsys)
    assert "run.total_steps" in line and "edited" in line
    assert _snapshot(run) == before
    assert morl(["resume", str(run), "run.total_steps=60"]) == 0  # the same change, given explicitly


def test_a_config_that_no_longer_fits_the_networks_gives_one_line(run_dir, tmp_path, capsys):
    run = _copy_run(run_dir, tmp_path / "run")
    (run / "checkpoints" / "last.prev.pt").unlink()
    config = run / "config.yaml"
    data = yaml.safe_load(config.read_text())
    data["agent"]["hidden_sizes"] = [24, 24]
    config.write_text(yaml.safe_dump(data))
    before = _snapshot(run)
    assert morl(["eval", str(run)]) == 2
    assert "networks" in _one_error_line(capsys)
    assert _snapshot(run) == before


@pytest.mark.parametrize("content", ["", "\n# only a comment\n", b"\x89PNG\r\n\x1a\n\x00\xff\xfe"])
def test_empty_and_binary_config_files_are_refused(tmp_path, content, capsys):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "runs"
    assert morl(["train", str(path), f"run.out_dir={out}"]) == 2
    assert "bad.yaml" in _one_error_line(capsys)
    assert not out.exists()


@pytest.mark.parametrize("content", ["", ": : :\n  - [", b"\xff\xfe\x00"])
def test_an_empty_or_corrupted_run_config_gives_one_line(run_dir, tmp_path, content, capsys):
    run = _copy_run(run_dir, tmp_path / "run")
    (run / "config.yaml").write_bytes(content if isinstance(content, bytes) else content.encode())
    before = _snapshot(run)
    for command in ("resume", "eval"):
        assert morl([command, str(run)]) == 2
        assert "config.yaml" in _one_error_line(capsys)
    assert _snapshot(run) == before


def test_a_read_only_output_folder_gives_one_line(tmp_path, capsys, monkeypatch):
    # Simulated (the suite may run as root, who writes into read-only folders): mkdir is refused.
    out = tmp_path / "ro"

    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refused)
    assert morl(["train", QUICK, *TINY, "run.total_steps=20", f"run.out_dir={out}"]) == 2
    line = _one_error_line(capsys)
    assert str(out) in line and "Permission denied" in line
    assert not out.exists()


def test_an_output_path_that_is_a_file_gives_one_line_and_leaves_it(tmp_path, capsys):
    out = tmp_path / "a_file"
    out.write_text("keep me")
    assert morl(["train", QUICK, *TINY, "run.total_steps=20", f"run.out_dir={out}"]) == 2
    assert "a_file" in _one_error_line(capsys)
    assert out.read_text() == "keep me"


def test_a_full_disk_leaves_no_half_created_run_directory(tmp_path, capsys, monkeypatch):
    import morl.runners.checkpoint as ckpt

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "runs"))

    monkeypatch.setattr(ckpt, "_atomic_write_bytes", full)
    out = tmp_path / "runs"
    assert morl(["train", QUICK, *TINY, "run.total_steps=20", f"run.out_dir={out}"]) == 2
    assert "No space left" in _one_error_line(capsys)
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.integration  # a subprocess
def test_a_second_process_on_the_same_run_directory_is_refused(run_dir, tmp_path):
    import fcntl

    run = _copy_run(run_dir, tmp_path / "run")
    with open(run / ".lock", "a+") as held:  # what a running `morl resume` holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        proc = subprocess.run(
            [sys.executable, "-m", "morl.runners.cli", "resume", str(run), "run.total_steps=60"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "in use by another morl process (pid 4242)" in proc.stderr
    assert torch_load(run / "checkpoints" / "last.pt")["step"] == 40  # nothing ran
