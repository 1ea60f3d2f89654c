"""`morl report`'s tables and files from one hand-written summary: the number formats, each
Markdown table row by row, the CSV rows, JSON without NaN, and the sections report.md holds."""

import csv
import io
import json

import pytest

from morl.runners.report.tables import (
    CSV_COLUMNS,
    delta_table,
    fmt,
    improvement_table,
    main_table,
    markdown,
    more_table,
    per_task_table,
    to_csv,
    to_json,
    with_ci,
)


def _e(value, lo, hi):
    return {"value": value, "ci": [lo, hi]}


def _summary(**extra):
    """Two methods on success rates; mgda was never evaluated on task b."""
    return {
        "metric": "eval/success",
        "higher_is_better": True,
        "best_possible": 1.0,
        "confidence": 0.95,
        "reps": 2000,
        "seed": 0,
        "methods": [
            {
                "method": "cagrad",
                "runs": 3,
                "final": {
                    "mean": _e(0.5, 0.25, 0.75),
                    "iqm": _e(0.4, 0.2, 0.6),
                    "median": _e(0.45, 0.3, 0.7),
                    "optimality_gap": _e(0.5, 0.25, 0.75),
                },
                "best_over_training": {"mean": _e(0.9, 0.8, 1.0)},
                "per_task": {"a": _e(0.25, 0.0, 0.5), "b": _e(0.75, 0.5, 1.0)},
            },
            {
                "method": "mgda",
                "runs": 2,
                "final": {
                    "mean": _e(0.125, 0.0, 0.25),
                    "iqm": _e(0.1, 0.0, 0.2),
                    "median": _e(0.15, 0.0, 0.3),
                    "optimality_gap": _e(0.875, 0.75, 1.0),
                },
                "best_over_training": {"mean": _e(0.2, 0.1, 0.3)},
                "per_task": {"a": _e(0.125, 0.0, 0.25)},
            },
        ],
        "probability_of_improvement": [{"x": "cagrad", "y": "mgda", "value": 0.8, "ci": [0.6, 0.95]}],
        **extra,
    }


DELTA = {
    "baseline": "cagrad",
    "methods": [{"method": "mgda", "runs": 3, "value": 3.3333, "ci": [-25.0, 25.0], "per_seed": [25.0, -25.0, 10.0], "seeds": [0, 1, 2]}],
}  # fmt: skip


@pytest.mark.parametrize(
    "value, best, text",
    [
        (0.12345, 1.0, "0.123"),  # a rate: 3 decimals
        (12.345, 100.0, "12.3"),  # a percentage: 1 decimal
        (1234.567, None, "1235"),  # otherwise 4 significant digits
        (0.000123456, None, "0.0001235"),
        (float("nan"), 1.0, "n/a"),
        (None, None, "n/a"),
    ],
)
def test_numbers_are_formatted_by_the_scale_of_the_metric(value, best, text):
    assert fmt(value, best) == text


def test_an_interval_follows_its_value_in_brackets():
    assert with_ci(_e(0.5, 0.25, 0.875), 1.0) == "0.500 [0.250, 0.875]"
    assert with_ci(_e(55.04, 40.0, 70.96), 100.0) == "55.0 [40.0, 71.0]"


def test_main_table_rows_hold_final_mean_iqm_and_best_over_training():
    assert main_table(_summary()).splitlines() == [
        "| method | runs | final mean [95% CI] | final IQM [95% CI] | best over training, mean [95% CI] |",
        "|---|---|---|---|---|",
        "| cagrad | 3 | 0.500 [0.250, 0.750] | 0.400 [0.200, 0.600] | 0.900 [0.800, 1.000] |",
        "| mgda | 2 | 0.125 [0.000, 0.250] | 0.100 [0.000, 0.200] | 0.200 [0.100, 0.300] |",
    ]


def test_more_table_has_the_gap_column_only_when_every_method_has_a_gap():
    s = _summary()
    assert more_table(s).splitlines() == [
        "| method | final median [95% CI] | final optimality gap [95% CI] |",
        "|---|---|---|",
        "| cagrad | 0.450 [0.300, 0.700] | 0.500 [0.250, 0.750] |",
        "| mgda | 0.150 [0.000, 0.300] | 0.875 [0.750, 1.000] |",
    ]
    del s["methods"][1]["final"]["optimality_gap"]
    assert more_table(s).splitlines()[0] == "| method | final median [95% CI] |"
    assert more_table(s).splitlines()[2] == "| cagrad | 0.450 [0.300, 0.700] |"


def test_per_task_table_has_a_row_per_task_and_a_blank_where_a_method_lacks_it():
    assert per_task_table(_summary()).splitlines() == [
        "| task | cagrad | mgda |",
        "|---|---|---|",
        "| a | 0.250 [0.000, 0.500] | 0.125 [0.000, 0.250] |",
        "| b | 0.750 [0.500, 1.000] |  |",
    ]


def test_improvement_table_reads_row_over_column_with_a_dash_on_the_diagonal():
    assert improvement_table(_summary()).splitlines() == [
        "| P(row > column) | cagrad | mgda |",
        "|---|---|---|",
        "| cagrad | — | 0.800 [0.600, 0.950] |",
        "| mgda |  | — |",
    ]


def test_delta_table_signs_every_number_and_lists_the_seeds():
    assert delta_table(_summary(delta_m=DELTA)).splitlines() == [
        "| method | seeds | Δm% vs cagrad [95% CI] | per seed |",
        "|---|---|---|---|",
        "| cagrad |  | 0 (baseline) |  |",
        "| mgda | 3 | +3.33 [-25.00, +25.00] | +25.00 / -25.00 / +10.00 (seeds 0, 1, 2) |",
    ]


def test_csv_has_one_row_per_number():
    rows = list(csv.reader(io.StringIO(to_csv(_summary(delta_m=DELTA)))))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert rows[1] == ["aggregate", "cagrad", "", "", "final", "mean", "0.5", "0.25", "0.75", "3"]
    assert ["aggregate", "mgda", "", "", "best_over_training", "mean", "0.2", "0.1", "0.3", "2"] in rows
    assert ["per_task", "cagrad", "", "b", "final", "mean", "0.75", "0.5", "1.0", "3"] in rows
    assert rows[-2] == ["probability_of_improvement", "cagrad", "mgda", "", "final", "P(x>y)", "0.8", "0.6", "0.95", ""]
    assert rows[-1] == ["delta_m", "mgda", "cagrad", "", "final", "delta_m_percent", "3.3333", "-25.0", "25.0", "3"]
    # 2 methods x (4 + 1 aggregates) + 3 per-task + 1 pair + 1 delta + the header
    assert len(rows) == 1 + 10 + 3 + 1 + 1


def test_json_turns_nan_into_null_and_carries_the_notes():
    s = _summary()
    s["methods"][1]["per_task"]["b"] = _e(float("nan"), float("nan"), float("nan"))
    data = json.loads(to_json(s, ["a note"]))
    assert data["methods"][1]["per_task"]["b"] == {"value": None, "ci": [None, None]}
    assert data["notes"] == ["a note"] and data["methods"][0]["final"]["mean"] == {"value": 0.5, "ci": [0.25, 0.75]}


def test_report_md_has_the_sections_its_summary_holds():
    full = markdown(_summary(delta_m=DELTA), ["a note"], "sweep s", ["learning_curves"], "morl report s")
    assert "Made by `morl report s` from sweep s." in full
    assert "Metric `eval/success` (higher is better). Intervals: 95 % stratified bootstrap" in full
    assert "2000 resamples, seed 0" in full
    for heading in (
        "## Per task",
        "## Δm% against a baseline",
        "## Probability of improvement",
        "## Notes",
        "## Plots",
    ):
        assert heading in full
    assert "- a note" in full and "![learning_curves](plots/learning_curves.png)" in full
    bare = markdown(_summary(probability_of_improvement=[], higher_is_better=False), [], "2 run directories", [], "x")
    assert "(lower is better)" in bare and "## Per task" in bare
    for heading in ("## Δm%", "## Probability of improvement", "## Notes", "## Plots"):
        assert heading not in bare
