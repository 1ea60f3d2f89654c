"""``morl bench scale --growth``: every case reports the ratio of the larger setting's time over the
smaller one's and its goal (the size ratio + 10 %); the timing alternates small and large within a
budget and takes medians."""

import itertools

import pytest

from morl.runners.bench import growth


def test_quick_growth_reports_a_ratio_and_its_goal_for_every_case():
    rows = growth.measure(True, pairs=1)
    assert [(r["step"], r["method"]) for r in rows] == [(c[0], c[2]) for c in growth.CASES]
    for r in rows:
        small, large = next(r[axis] for axis in ("T", "n", "K") if axis in r)
        assert r["small_s"] > 0 and r["large_s"] > 0 and r["ratio"] > 0 and r["pairs"] == 1
        assert r["goal"] == pytest.approx(1.1 * large / small)
        assert r["met"] == (r["ratio"] <= r["goal"])
    table = growth.format_table(rows)
    assert "| MT-SAC update | upgrad | T 2 → 4 |" in table and "| FL round | most_mgda | n 10 → 20 |" in table


def _clock(monkeypatch, durations):
    """time.perf_counter advancing by each call's duration in turn."""
    ticks = itertools.accumulate(itertools.chain.from_iterable((0.0, d) for d in durations))
    monkeypatch.setattr(growth.time, "perf_counter", lambda: next(ticks))


def test_interleaved_takes_medians_over_pairs_within_the_budget(monkeypatch):
    _clock(monkeypatch, [1.0, 9.0] + [1.0, 3.0, 2.0, 4.0, 1.0, 5.0])  # warm-up, then pairs of 4, 6, 6 s
    out = growth.interleaved(lambda: None, lambda: None, pairs=5, budget=15.0)  # the third pair passes 15 s
    assert out == {"small_s": 1.0, "large_s": 4.0, "ratio": 3.0, "pairs": 3}


def test_interleaved_keeps_the_warm_up_pair_when_the_large_call_is_over_budget(monkeypatch):
    _clock(monkeypatch, [2.0, 50.0])
    assert growth.interleaved(lambda: None, lambda: None, pairs=5, budget=30.0) == {
        "small_s": 2.0,
        "large_s": 50.0,
        "ratio": 25.0,
        "pairs": 1,
    }


def test_a_warm_up_pair_exactly_at_the_budget_is_not_kept(monkeypatch):
    _clock(monkeypatch, [1.0, 30.0] + [1.0, 2.0] * 5)  # the large call takes the whole budget, not more
    out = growth.interleaved(lambda: None, lambda: None, pairs=5, budget=30.0)
    assert out == {"small_s": 1.0, "large_s": 2.0, "ratio": 2.0, "pairs": 5}


def test_a_case_meets_its_goal_when_its_time_grows_at_most_10_percent_faster_than_its_size(monkeypatch):
    # QUICK sizes: T 2 -> 4 (goal 1.1 * 4 / 2 = 2.2), n 10 -> 20 (2.2), K 2 -> 4 (2.2); one pair each after the warm-up
    _clock(monkeypatch, [1.0, 1.0] + [1.0, 2.0] + [1.0, 1.0] + [1.0, 3.0] + [1.0, 1.0] + [0.5, 1.125])
    built, reported = [], []

    def make(size, method, sizes):
        built.append((size, method, sizes["hidden"]))
        return lambda: None

    cases = (
        ("MT-SAC update", "T", "mean", make),
        ("FL round", "n", "fedavg", make),
        ("supervised step", "K", "x", make),
    )
    rows = growth.measure(True, cases=cases, report=reported.append, pairs=1)
    assert built == [
        (2, "mean", 16),
        (4, "mean", 16),
        (10, "fedavg", 16),
        (20, "fedavg", 16),
        (2, "x", 16),
        (4, "x", 16),
    ]
    assert [(r["ratio"], r["goal"], r["met"]) for r in rows] == [
        (2.0, pytest.approx(2.2), True),
        (3.0, pytest.approx(2.2), False),
        (2.25, pytest.approx(2.2), False),  # just above the goal
    ]
    assert rows[1]["n"] == [10, 20] and "T" not in rows[1]
    assert reported == rows


def test_the_table_row_names_the_sizes_the_times_and_whether_the_goal_is_met():
    rows = [
        {"step": "FL round", "method": "fedavg", "n": [100, 1000], "goal": 11.0, "small_s": 0.01234,
         "large_s": 0.1, "ratio": 8.104, "pairs": 5, "met": True},
        {"step": "supervised step", "method": "params, shared", "K": [4, 40], "goal": 11.0, "small_s": 1.0,
         "large_s": 12.5, "ratio": 12.5, "pairs": 2, "met": False},
    ]  # fmt: skip
    assert growth.format_table(rows).splitlines()[2:] == [
        "| FL round | fedavg | n 100 → 1000 | 0.012 | 0.100 | 8.10 | ≤ 11.0 met | 5 |",
        "| supervised step | params, shared | K 4 → 40 | 1.000 | 12.500 | 12.50 | ≤ 11.0 NOT met | 2 |",
    ]
