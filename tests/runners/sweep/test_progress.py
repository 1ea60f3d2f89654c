"""The sweep's progress line: done / running / failed counts and an ETA from the progress this
invocation made itself (a resumed run's earlier part and runs finished before do not count)."""

import json
import time

import pytest

from morl.runners.sweep.progress import SweepProgress, _fraction


def write_position(run_dir, position, total=100):
    run_dir.mkdir(exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"status": "running", "position": position, "total": total}))


@pytest.mark.parametrize(
    "position, total, fraction",
    [(30, 120, 0.25), (0, 10, 0.0), (150, 100, 1.0), (-5, 100, 0.0), (5, 0, 0.0), ("3", 10, 0.0), (None, 10, 0.0)],
)
def test_a_runs_fraction_is_its_position_over_its_total_within_0_and_1(tmp_path, position, total, fraction):
    write_position(tmp_path / "a", position, total)
    assert _fraction(tmp_path / "a") == fraction


def test_a_run_without_run_json_has_made_no_progress(tmp_path):
    assert _fraction(tmp_path / "nothing") == 0.0


def test_off_a_terminal_each_event_is_one_line_with_the_counts(tmp_path, capsys):
    bar = SweepProgress(4, enabled=False)
    write_position(tmp_path / "a", 10)
    bar.update(1, {"a": tmp_path / "a"}, 2, "a: resume")
    bar.update(1, {"a": tmp_path / "a"}, 2)  # no event: no line
    bar.close()
    assert capsys.readouterr().err == "morl sweep: a: resume [1/4 done, 1 running, 2 failed, eta ?]\n"


def test_the_eta_counts_only_the_progress_this_invocation_made(tmp_path, capsys):
    bar = SweepProgress(4, enabled=False)
    write_position(tmp_path / "a", 50)  # a resumed run, half done by an earlier sweep
    bar.update(0, {"a": tmp_path / "a"}, 0, "a: resume")
    assert "eta ?" in capsys.readouterr().err  # no progress made yet: no rate
    write_position(tmp_path / "a", 90)
    bar.start = time.monotonic() - 40.0
    bar.update(0, {"a": tmp_path / "a"}, 0, "step")
    # 0.4 of a run in 40 s; 4 - 0.9 runs left: 310 s
    assert "0/4 done, 1 running, 0 failed, eta 05:10" in capsys.readouterr().err
    assert bar.bar.n == pytest.approx(0.9)
    bar.ended("a")  # finished: this invocation made its second half
    bar.start = time.monotonic() - 50.0
    bar.update(1, {}, 0, "a finished")
    # 0.5 of a run in 50 s; 3 runs left: 300 s
    assert "1/4 done, 0 running, 0 failed, eta 05:00" in capsys.readouterr().err
    bar.close()


def test_a_run_this_invocation_made_from_the_start_counts_whole(tmp_path, capsys):
    bar = SweepProgress(4, enabled=False)
    bar.ended("b")  # never seen running (it ran between two updates)
    bar.start = time.monotonic() - 100.0
    write_position(tmp_path / "a", 50)
    bar.update(1, {"a": tmp_path / "a"}, 0, "x")
    # 1 run made in 100 s (a's first half was there before); 4 - 1.5 runs left: 250 s
    assert "eta 04:10" in capsys.readouterr().err
    bar.close()
