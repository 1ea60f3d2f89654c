"""status.json: each cell's state and the attempts of every invocation, and the summary a sweep
ends with."""

import json
import re
from datetime import datetime

from morl.runners.sweep.cells import Cell
from morl.runners.sweep.status import SweepStatus, log_path

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}")


def cells(*names):
    return [Cell(name, "train", "/configs/c.yaml", (f"run.seed={i}",), {}, i) for i, name in enumerate(names)]


def test_status_json_holds_each_cells_state_run_dir_and_log_and_the_counts(tmp_path):
    status = SweepStatus(tmp_path, cells("a-s0", "b-s1"), "local")
    status.set("a-s0", "done")
    doc = json.loads((tmp_path / "status.json").read_text())
    assert STAMP.fullmatch(doc.pop("updated"))
    assert doc == {
        "engine": "local",
        "counts": {"done": 1, "pending": 1},
        "cells": {
            "a-s0": {"status": "done", "run_dir": "a-s0", "log": "logs/a-s0.log", "attempts": []},
            "b-s1": {"status": "pending", "run_dir": "b-s1", "log": "logs/b-s1.log", "attempts": []},
        },
    }
    assert log_path(tmp_path, cells("a-s0")[0]) == tmp_path / "logs" / "a-s0.log"


def test_attempts_are_kept_across_invocations_and_states_are_not(tmp_path):
    started = datetime.fromisoformat("2001-09-09T01:46:40+00:00").timestamp()
    first = SweepStatus(tmp_path, cells("a"), "local")
    first.attempt("a", "start", started, -9)
    first.set("a", "failed")
    second = SweepStatus(tmp_path, cells("a"), "ray")  # the next `morl sweep`
    second.attempt("a", "resume", started, None, "RayTaskError: the node died")
    second.save()
    cell = json.loads((tmp_path / "status.json").read_text())["cells"]["a"]
    assert cell["status"] == "pending"  # decided again from the run directory
    assert [(a["action"], a["engine"], a["exit_status"], a.get("error")) for a in cell["attempts"]] == [
        ("start", "local", -9, None),
        ("resume", "ray", None, "RayTaskError: the node died"),
    ]
    assert "error" not in cell["attempts"][0]  # said only when there is one
    for attempt in cell["attempts"]:
        assert datetime.strptime(attempt["started"], "%Y-%m-%dT%H:%M:%S%z").timestamp() == started
        assert STAMP.fullmatch(attempt["ended"])


def test_a_status_json_that_is_not_json_is_started_afresh(tmp_path):
    (tmp_path / "status.json").write_text("{not json")
    assert SweepStatus(tmp_path, cells("a"), "local").cells["a"]["attempts"] == []


def test_the_summary_counts_the_states_and_names_each_failed_or_diverged_cell_with_its_last_words(tmp_path):
    status = SweepStatus(tmp_path, cells("ok", "bad", "div", "lost", "wait"), "local")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "bad.log").write_text(
        "==== morl sweep 2001-09-09T01:46:40+0000 on host: morl train c.yaml\n"
        "morl: run directory bad\n"
        "  morl: error: aggregator.name: unknown aggregator 'x'  \n"
        "\n"
        "==== exit status 2\n"
    )
    status.attempt("bad", "start", 0.0, 2)
    status.attempt("div", "start", 0.0, 3)  # no log at all
    status.attempt("lost", "resume", 0.0, None, "RayTaskError: the node died")
    for name, state in [("ok", "done"), ("bad", "failed"), ("div", "diverged"), ("lost", "failed")]:
        status.set(name, state)
    assert status.summary() == [
        "morl sweep: 5 cells: 1 pending, 1 done, 1 diverged, 2 failed",
        f"morl sweep:   failed: bad (exit status 2: morl: error: aggregator.name: unknown aggregator 'x'); "
        f"log {tmp_path}/logs/bad.log",
        f"morl sweep:   diverged: div (exit status 3); log {tmp_path}/logs/div.log",
        f"morl sweep:   failed: lost (RayTaskError: the node died); log {tmp_path}/logs/lost.log",
    ]


def test_a_sweep_that_did_everything_sums_up_in_one_line(tmp_path):
    status = SweepStatus(tmp_path, cells("a", "b"), "ray")
    status.set("a", "done")
    status.set("b", "interrupted")
    assert status.summary() == ["morl sweep: 2 cells: 1 done, 1 interrupted"]
