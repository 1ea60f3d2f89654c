"""``morl bench most``: each figure is the least disturbed of its repeats, timed between two device
syncs, and the overhead is transport plus aggregation over the clients' own work."""

import argparse
import itertools
import json

import pytest

from morl.runners.bench import most


def test_best_ms_is_the_fastest_repeat_in_milliseconds(monkeypatch):
    durations = [0.003, 0.0015, 0.002]  # seconds
    ticks = itertools.accumulate(itertools.chain.from_iterable((0.0, d) for d in durations))
    monkeypatch.setattr(most.time, "perf_counter", lambda: next(ticks))
    assert most._best_ms(lambda: None, 3, lambda: None) == pytest.approx(1.5)


def test_every_repeat_is_timed_between_two_syncs():
    events = []
    most._best_ms(lambda: events.append("fn"), 2, lambda: events.append("sync"))
    assert events == ["sync", "fn", "sync", "sync", "fn", "sync"]


@pytest.mark.integration  # builds and runs a 30-client round (about 15 s on a loaded 2-core machine)
def test_quick_run_reports_the_overhead_of_transport_and_aggregation(monkeypatch, tmp_path, capsys):
    # the four figures of a row in the order run() times them: clients, OT, OT with tau, aggregation
    figures = iter([200.0, 30.0, 45.0, 10.0])
    repeats = []

    def best_ms(fn, n, sync):
        repeats.append(n)
        return next(figures)

    monkeypatch.setattr(most, "_best_ms", best_ms)
    out = tmp_path / "most.json"
    assert most.run(argparse.Namespace(quick=True, device="cpu", out=str(out))) == 0
    (row,) = json.loads(out.read_text())
    # FedProx synthetic data: 60 features, 10 classes -> 60 x 10 + 10 logistic-regression parameters
    assert row == {
        "n": 30, "m": 5, "P": 610, "device": "cpu", "client_ms": 200.0, "ot_ms": 30.0, "ot_tau_ms": 45.0,
        "aggregate_ms": 10.0, "overhead_pct": 20.0,  # 100 * (30 + 10) / 200
    }  # fmt: skip
    assert repeats == [3, 3, 3, 3]
    assert "overhead  20.0 %" in capsys.readouterr().out
