"""``morl sweep``: spec parsing and cell names; the scheduler's contract (each cell run to an end
once, finished cells skipped, killed runs resumed, failed cells retried max_retries times and
reported, Ctrl-C stops every run with a checkpoint) through a stand-in ``morl`` that keeps the
shell's run-directory contract (tests/sweep_fake_run.py); and real point-mass runs through the
local engine and through a local Ray instance."""

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from morl.runners import cli
from morl.runners.errors import UserError
from morl.runners.sweep.cells import expand, override_text
from morl.runners.sweep.local_engine import LocalEngine
from morl.runners.sweep.manifest import read_manifest, sweep_dir, write_manifest
from morl.runners.sweep.scheduler import Scheduler
from morl.runners.sweep.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
QUICK = str(ROOT / "configs" / "quickstart_point_mass.yaml")
REGRESSION = str(ROOT / "configs" / "supervised_regression_mgda.yaml")
FAKE = (sys.executable, str(ROOT / "tests" / "sweep_fake_run.py"))


def write_spec(tmp_path: Path, **keys) -> Path:
    spec = {"name": "s", "out_dir": str(tmp_path / "out"), "base": QUICK, **keys}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def fake_sweep(tmp_path: Path, progress=False, **keys):
    """Expand, write the manifest and return (folder, cells, run) with ``run()`` -> exit status."""
    spec = load_spec(write_spec(tmp_path, **keys))
    cells, folder = expand(spec), sweep_dir(spec)
    write_manifest(folder, spec, cells)

    def run(max_parallel=None):
        engine = LocalEngine(spec.resources.cpus)
        scheduler = Scheduler(folder, cells, engine, max_retries=spec.max_retries, threads=1,
                              max_parallel=max_parallel, program=FAKE, progress=progress)
        try:
            return scheduler.run()
        finally:
            engine.close()
    return folder, cells, run


def attempts(folder: Path, cell: str) -> list[str]:
    """``start``/``resume`` per attempt, from the log's header lines (written by the worker)."""
    lines = (folder / "logs" / f"{cell}.log").read_text().splitlines()
    return ["resume" if " morl resume " in line else "start" for line in lines if line.startswith("==== morl sweep ")]


def run_status(folder: Path, cell: str) -> str:
    return json.loads((folder / cell / "run.json").read_text())["status"]


# ----- spec and cells -----------------------------------------------------------------------
def test_grid_and_seeds_give_named_cells_with_the_seed_at_the_kinds_key(tmp_path):
    path = write_spec(tmp_path, grid={"aggregator.name": ["mgda", "pcgrad"], "agent.hidden_sizes": [[32, 32]]},
                      seeds=[1, 2, 3], overrides={"run.total_steps": 50, "aggregator.options": {}})
    cells = expand(load_spec(path))
    # a grid key with one value is the same in every cell: in the group, not in the name
    assert [c.name for c in cells] == ["mgda-s1", "mgda-s2", "mgda-s3", "pcgrad-s1", "pcgrad-s2", "pcgrad-s3"]
    assert {c.command for c in cells} == {"train"}  # from the config's kind
    assert cells[4].overrides == ("run.total_steps=50", "aggregator.options={}", "aggregator.name=pcgrad",
                                  "agent.hidden_sizes=[32, 32]", "run.seed=2")
    assert cells[4].group == {"aggregator.name": "pcgrad", "agent.hidden_sizes": [32, 32]} and cells[4].seed == 2
    sup = expand(load_spec(write_spec(tmp_path, base=REGRESSION, seeds=[0])))
    assert (sup[0].command, sup[0].overrides, sup[0].name) == ("supervised", ("seed=0",), "s0")


def test_list_entries_bases_and_unsafe_values_give_unique_safe_names(tmp_path):
    path = write_spec(tmp_path, base=[QUICK, REGRESSION], command="train",
                      list=[{"aggregator.name": "moco", "aggregator.options": {"base": "cagrad"}}, {"aggregator.name": "a/b"},
                            {"aggregator.name": "a b"}], grid={"agent.actor_lr": [0.001, 0.0003]})
    names = [c.name for c in expand(load_spec(path))]
    assert names[:2] == ["quickstart_point_mass-moco-base_cagrad-actor_lr0.001",
                          "quickstart_point_mass-moco-base_cagrad-actor_lr0.0003"]
    assert names[2:6] == ["quickstart_point_mass-a_b-actor_lr0.001", "quickstart_point_mass-a_b-actor_lr0.0003",
                          "quickstart_point_mass-a_b-actor_lr0.001-2", "quickstart_point_mass-a_b-actor_lr0.0003-2"]
    assert len(set(names)) == len(names) == 12
    # empty values say nothing; a mapping is named item by item
    path = write_spec(tmp_path, list=[{"aggregator.name": "mean", "aggregator.options": {}},
                                      {"aggregator.name": "cagrad", "aggregator.options": {"c": 0.5}}], seeds=[0])
    assert [c.name for c in expand(load_spec(path))] == ["mean-s0", "cagrad-c0.5-s0"]
    assert all(n.replace("-", "").replace("_", "").replace(".", "").isalnum() for n in names)


def test_override_text_reads_back_as_the_value():
    from morl.runners.config import apply_overrides  # what `morl train ... k=v` parses them with

    values = ["mgda", "true", "1", "", " x", "a: b", "*x", "@x", "a=b", 0.5, 1e-5, True, None, [32, 32], {"c": 0.5, "base": "cagrad"}]
    for value in values:
        assert apply_overrides({}, [override_text("k", value)])["k"] == value
    assert [override_text("k", v) for v in ("mgda", "true", [32, 32])] == ["k=mgda", "k='true'", "k=[32, 32]"]


@pytest.mark.parametrize("keys, message", [
    ({"grid": {}}, "grid is empty"),
    ({"grid": {"aggregator.name": []}}, "aggregator.name must be a non-empty list"),
    ({"grids": {}}, "unknown sweep key 'grids'; allowed keys: name, out_dir, base"),
    ({"seeds": [1, 1]}, "seeds lists a seed twice"),
    ({"seeds": ["a"]}, "seeds must be a non-empty list of integers"),
    ({"command": "learn"}, "command 'learn' is not allowed; allowed: train, supervised, forum, fl, prompt"),
    ({"base": "nope.yaml"}, "base config 'nope.yaml' does not exist"),
    ({"name": "a/b"}, "name must be a non-empty string of letters"),
    ({"resources": {"cpus": 0}}, "resources.cpus must be an integer >= 1"),
    ({"resources": {"memory": 1}}, "resources must be a mapping with keys cpus and gpus"),
    ({"max_retries": -1}, "max_retries must be an integer >= 0"),
    ({"list": [{}]}, "list entries must each set at least one key"),
    ({"grid": {"bad key": [1]}}, "'bad key' is not a config key"),
])
def test_bad_specs_stop_with_one_line(tmp_path, keys, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_spec(write_spec(tmp_path, **keys))


@pytest.mark.parametrize("keys, message", [
    ({"grid": {"run.seed": [1]}, "seeds": [0]}, "run.seed is set both in grid and in seeds"),
    ({"grid": {"a.b": [1]}, "overrides": {"a.b": 2}}, "a.b is set both in overrides and in grid"),
])
def test_a_key_set_twice_stops_the_expansion(tmp_path, keys, message):
    with pytest.raises(UserError, match=message):
        expand(load_spec(write_spec(tmp_path, **keys)))


def test_a_rerun_may_add_cells_but_not_change_one(tmp_path):
    folder, cells, _ = fake_sweep(tmp_path, seeds=[1])
    manifest = read_manifest(folder)
    assert [c["name"] for c in manifest["cells"]] == ["s1"] and manifest["cells"][0]["run_dir"] == "s1"
    spec = load_spec(write_spec(tmp_path, seeds=[1, 2]))
    write_manifest(folder, spec, expand(spec))  # more seeds: fine
    spec = load_spec(write_spec(tmp_path, seeds=[1, 2], overrides={"run.total_steps": 9}))
    with pytest.raises(UserError, match="cell 's1' of .* ran `train quickstart_point_mass.yaml run.seed=1`"):
        write_manifest(folder, spec, expand(spec))


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


def kill_when_checkpointed(run_dir: Path, timeout: float = 30.0, sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` to the process that owns ``run_dir`` (its pid is in .lock) once it has a checkpoint."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lock, ckpt = run_dir / ".lock", run_dir / "checkpoints" / "last.pt"
        if ckpt.is_file() and lock.is_file() and lock.read_text().strip():
            pid = int(lock.read_text().split()[0])
            os.kill(pid, sig)
            return pid
        time.sleep(0.01)
    raise AssertionError(f"{run_dir} got no checkpoint within {timeout} s")


def test_a_run_killed_mid_sweep_resumes_on_the_rerun_and_nothing_runs_twice(tmp_path):
    folder, cells, run = fake_sweep(tmp_path, grid={"aggregator.name": ["mgda", "pcgrad"]}, seeds=[1, 2, 3],
                                    overrides={"steps": 40, "sleep": 0.02}, max_retries=0)
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


def test_a_killed_run_is_resumed_within_the_same_sweep_when_retries_allow(tmp_path):
    folder, cells, run = fake_sweep(tmp_path, seeds=[1, 2], overrides={"steps": 40, "sleep": 0.02}, max_retries=1)
    killer = threading.Thread(target=kill_when_checkpointed, args=(folder / "s2",))
    killer.start()
    assert run() == 0
    killer.join()
    assert attempts(folder, "s2") == ["start", "resume"] and attempts(folder, "s1") == ["start"]


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
    assert "s2 stopped by a signal to its run (exit status 130); the next morl sweep resumes it" in capsys.readouterr().err
    assert run() == 0
    assert attempts(folder, "s2") == ["start", "resume"] and run_status(folder, "s2") == "finished"


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


# ----- real runs: `morl sweep` end to end ----------------------------------------------------
# tests/test_resume.py's tiny point-mass settings; 120 steps leave the kill below a window of
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


@pytest.mark.slow
def test_local_with_a_killed_run_and_ray_give_bitwise_equal_runs(tmp_path):
    """2 aggregators x 3 seeds: local, one run SIGKILLed half-way and resumed by the re-run;
    then the same sweep on a local Ray instance; every run's final state is bitwise the same."""
    from morl.runners.checkpoint import torch_load
    from state_equality import assert_state_equal

    local = real_spec(tmp_path, "local", [1, 2, 3], total_steps=120, max_retries=0)
    folder = tmp_path / "local" / "agg"
    killer = threading.Thread(target=kill_when_checkpointed, args=(folder / "pcgrad-s2", 300.0))
    killer.start()
    assert morl("sweep", local, "--no-progress") == 1  # the killed run, reported (no retries)
    killer.join()
    assert morl("sweep", local, "--no-progress") == 0
    assert attempts(folder, "pcgrad-s2") == ["start", "resume"]
    assert morl("sweep", real_spec(tmp_path, "ray", [1, 2, 3], total_steps=120), "--engine", "ray", "--no-progress") == 0
    # the killed and resumed cell last: its training state first, then its evaluation state
    names = ["mgda-s1", "mgda-s2", "mgda-s3", "pcgrad-s1", "pcgrad-s3", "pcgrad-s2"]
    for name in names:
        a, b = folder / name, tmp_path / "ray" / "agg" / name
        assert attempts(b.parent, name) == ["start"] and (name == "pcgrad-s2" or attempts(folder, name) == ["start"])
        sa, sb = torch_load(a / "checkpoints" / "last.pt"), torch_load(b / "checkpoints" / "last.pt")
        assert sa["step"] == sb["step"] == 120
        for key in ("agent", "replay", "env", "rng", "eval_env", "stats"):
            assert_state_equal(sa[key], sb[key], f"{name}.{key}")
        assert json.loads((a / "final_metrics.json").read_text()) == json.loads((b / "final_metrics.json").read_text())


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


def test_the_ray_engine_retries_stops_and_skips_like_the_local_one(tmp_path):
    """The stand-in run on a local Ray instance (20 s here, mostly Ray's start-up): a failing cell is
    retried, a stop request reaches the runs inside Ray tasks, the re-run resumes them."""
    from morl.runners.sweep.ray_engine import RayEngine

    spec = load_spec(write_spec(tmp_path, list=[{"fail": 0}, {"fail": 1}], seeds=[1, 2], max_retries=1,
                                overrides={"steps": 60, "sleep": 0.02}))
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
