"""The report's numbers written out: Markdown tables (report.md), one long CSV (report.csv) and
JSON (report.json), all from the same ``summarise`` dictionary."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

CSV_COLUMNS = ("table", "method", "versus", "task", "protocol", "statistic", "value", "ci_low", "ci_high", "runs")


def fmt(value: float | None, best: float | None) -> str:
    """3 decimals for rates in [0, 1], 1 for percentages, 4 significant digits otherwise."""
    if value is None or value != value:
        return "n/a"
    if best == 1.0:
        return f"{value:.3f}"
    if best == 100.0:
        return f"{value:.1f}"
    return f"{value:.4g}"


def with_ci(entry: dict[str, Any], best: float | None) -> str:
    lo, hi = entry["ci"]
    return f"{fmt(entry['value'], best)} [{fmt(lo, best)}, {fmt(hi, best)}]"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main_table(s: dict[str, Any]) -> str:
    """Method, runs, final mean / IQM and best-over-training mean, each with its 95 % interval."""
    b = s["best_possible"]
    header = ["method", "runs", "final mean [95% CI]", "final IQM [95% CI]", "best over training, mean [95% CI]"]
    rows = [
        [
            m["method"],
            str(m["runs"]),
            with_ci(m["final"]["mean"], b),
            with_ci(m["final"]["iqm"], b),
            with_ci(m["best_over_training"]["mean"], b),
        ]
        for m in s["methods"]
    ]
    return _table(header, rows)


def more_table(s: dict[str, Any]) -> str:
    """Median and optimality gap of the final scores (the gap only for bounded scores)."""
    b = s["best_possible"]
    has_gap = all("optimality_gap" in m["final"] for m in s["methods"])
    header = ["method", "final median [95% CI]"] + (["final optimality gap [95% CI]"] if has_gap else [])
    rows = [
        [m["method"], with_ci(m["final"]["median"], b)]
        + ([with_ci(m["final"]["optimality_gap"], b)] if has_gap else [])
        for m in s["methods"]
    ]
    return _table(header, rows)


def per_task_table(s: dict[str, Any]) -> str:
    """Tasks as rows, methods as columns: final mean over runs [95 % CI]."""
    b = s["best_possible"]
    methods = s["methods"]
    tasks = list(dict.fromkeys(t for m in methods for t in m["per_task"]))
    rows = [[t] + [with_ci(m["per_task"][t], b) if t in m["per_task"] else "" for m in methods] for t in tasks]
    return _table(["task"] + [m["method"] for m in methods], rows)


def delta_table(s: dict[str, Any]) -> str:
    """Δm% against the baseline method, paired by seed: mean [95 % CI] and the per-seed values."""
    d = s["delta_m"]
    rows = [[d["baseline"], "", "0 (baseline)", ""]]
    rows += [
        [
            m["method"],
            str(m["runs"]),
            f"{m['value']:+.2f} [{m['ci'][0]:+.2f}, {m['ci'][1]:+.2f}]",
            " / ".join(f"{v:+.2f}" for v in m["per_seed"]) + f" (seeds {', '.join(map(str, m['seeds']))})",
        ]
        for m in d["methods"]
    ]
    return _table(["method", "seeds", f"Δm% vs {d['baseline']} [95% CI]", "per seed"], rows)


def improvement_table(s: dict[str, Any]) -> str:
    """P(row better than column) with its interval; blank where the tasks differ."""
    labels = [m["method"] for m in s["methods"]]
    cell = {(p["x"], p["y"]): with_ci(p, 1.0) for p in s["probability_of_improvement"]}
    rows = [[x] + ["—" if x == y else cell.get((x, y), "") for y in labels] for x in labels]
    return _table(["P(row > column)"] + labels, rows)


def to_json(s: dict[str, Any], notes: list[str]) -> str:
    return json.dumps(_finite({**s, "notes": notes}), indent=2) + "\n"


def _finite(obj: Any) -> Any:
    """NaN (a task never evaluated) becomes null: JSON has no NaN."""
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def to_csv(s: dict[str, Any]) -> str:
    """One row per number: (table, method, versus, task, protocol, statistic, value, CI, runs)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for m in s["methods"]:
        for protocol in ("final", "best_over_training"):
            for stat, e in m[protocol].items():
                w.writerow(["aggregate", m["method"], "", "", protocol, stat, e["value"], *e["ci"], m["runs"]])
        for task, e in m["per_task"].items():
            w.writerow(["per_task", m["method"], "", task, "final", "mean", e["value"], *e["ci"], m["runs"]])
    for p in s["probability_of_improvement"]:
        w.writerow(["probability_of_improvement", p["x"], p["y"], "", "final", "P(x>y)", p["value"], *p["ci"], ""])
    for m in s.get("delta_m", {}).get("methods", []):
        w.writerow(
            [
                "delta_m",
                m["method"],
                s["delta_m"]["baseline"],
                "",
                "final",
                "delta_m_percent",
                m["value"],
                *m["ci"],
                m["runs"],
            ]
        )
    return buf.getvalue()


PROTOCOLS = (
    "*final*: each run's last evaluation, one score per run and task; mean and IQM (interquartile mean) pool "
    "runs x tasks (Meta-World+ protocol, McLean et al. 2025, arXiv:2505.11289). *best over training*: per run, the "
    "best (highest; lowest for a lower-is-better metric) mean-over-tasks score over its evaluation points, "
    "averaged over runs (the MT10 tables of CAGrad and MoCo, arXiv:2110.14048, arXiv:2210.12624 Table 9)."
)


def markdown(s: dict[str, Any], notes: list[str], source: str, plots: list[str], command: str) -> str:
    """The whole report.md: tables, notes and the plots that were drawn."""
    better = "higher is better" if s["higher_is_better"] else "lower is better"
    parts = [
        "# morl report", "",
        f"Made by `{command}` from {source}.", "",
        f"Metric `{s['metric']}` ({better}). Intervals: {round(100 * s['confidence'])} % stratified bootstrap "
        f"(runs resampled within each task, percentile intervals, {s['reps']} resamples, seed {s['seed']}; "
        "Agarwal et al., NeurIPS 2021, arXiv:2108.13264). Formulas: docs/report.md.", "",
        PROTOCOLS, "",
        main_table(s), "",
        more_table(s), "",
        "## Per task (final, mean over runs [95% CI])", "",
        per_task_table(s), "",
    ]  # fmt: skip
    if "delta_m" in s:
        parts += [
            "## Δm% against a baseline (final scores, paired by seed)",
            "",
            "Δm = (100 / T) Σ_t (−1)^{s_t} (M_t − B_t) / B_t over the T tasks, s_t = 1 where higher is better "
            "(Maninis et al. 2019; Navon et al., ICML 2022, arXiv:2202.01017); each run against the baseline's "
            "run of the same seed; lower is better. Interval: bootstrap over the seeds.",
            "",
            delta_table(s),
            "",
        ]
    if s["probability_of_improvement"]:
        parts += [
            "## Probability of improvement (final scores)",
            "",
            "P(X > Y): the probability that a run of X beats a run of Y on a task drawn at random "
            "(ties count half), averaged over tasks.",
            "",
            improvement_table(s),
            "",
        ]
    if notes:
        parts += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    if plots:
        parts += ["## Plots", ""] + [f"![{p}](plots/{p}.png)" for p in plots] + [""]
    return "\n".join(parts)
