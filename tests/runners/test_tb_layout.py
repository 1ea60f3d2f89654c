"""The custom-scalars layout for comparisons (runners/tb_layout.py), read back through
TensorBoard's own plugin backends: every task's success in one chart, every aggregator weight in
one chart, conflicts and speed together. The HParams view is tested with the run logger, in
tests/runners/test_tensorboard.py, which uses this module's helpers."""

import json
import re

import numpy as np

from morl.runners.tb_layout import CATEGORY, layout, write_layout
from morl.runners.tensorboard import RunLogger, flatten_config

TASKS = ["reach", "push", "pick"]


def _backend(logdir):
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin

    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    tb = base_plugin.TBContext(
        logdir=str(logdir), multiplexer=mux, data_provider=data_provider.MultiplexerDataProvider(mux, str(logdir))
    )
    return mux, tb, context.RequestContext()


def _fake_rl_run(run_dir, aggregator: str, final_success: float, task_names=TASKS):
    """What an RL run logs (RunLogger, as runners/shell/loop.py does), with the layout and, at the
    end, HParams with its final metrics."""
    log = RunLogger(run_dir)
    write_layout(log.writer, task_names)
    for step in (100, 200):
        log.per_task("eval/success", np.full(len(task_names), final_success * step / 200), task_names, step)
        log.per_task("aggregator/weight", np.full(len(task_names), 1 / len(task_names)), task_names, step, mean=False)
        for tag in (
            "grad/cos_min",
            "grad/cos_mean",
            "grad/conflicting_pairs",
            "perf/transitions_per_s",
            "perf/updates_per_s",
        ):
            log.scalar(tag, 1.0, step)
    options = {"c": 0.5} if aggregator == "cagrad" else {}  # a key only some runs have
    cfg = {"aggregator": {"name": aggregator, "options": options}, "run": {"seed": 0}}
    log.hparams(flatten_config(cfg), {"final/eval/success/mean": final_success, "final/step": 200.0})
    log.close()


def test_layout_charts_match_exactly_the_tags_a_run_logs(tmp_path):
    _fake_rl_run(tmp_path / "a", "cagrad", 0.5)
    mux, _, _ = _backend(tmp_path)
    tags = set(mux.PluginRunToTagToContent("scalars")["a/tb"])
    charts = layout(TASKS)[CATEGORY]
    drawn = {title: {t for t in tags if any(re.search(p, t) for p in spec[1])} for title, spec in charts.items()}
    assert drawn["eval success, every task"] == {f"eval/success/{t}" for t in TASKS}
    assert drawn["aggregator weights"] == {f"aggregator/weight/{t}" for t in TASKS}
    assert drawn["gradient conflicts and speed"] == {
        "grad/cos_min",
        "grad/cos_mean",
        "grad/conflicting_pairs",
        "perf/transitions_per_s",
        "perf/updates_per_s",
    }
    # without task names the charts match any task, still not the mean
    any_task = layout()[CATEGORY]
    assert {t for t in tags if re.search(any_task["eval success, every task"][1][0], t)} == drawn[
        "eval success, every task"
    ]


def test_custom_scalars_plugin_merges_the_runs_layouts_once(tmp_path):
    from tensorboard.plugins.custom_scalar import custom_scalars_plugin

    _fake_rl_run(tmp_path / "a", "cagrad", 0.5)
    _fake_rl_run(tmp_path / "b", "mgda", 0.25)
    _, tb, ctx = _backend(tmp_path)
    merged = json.loads(custom_scalars_plugin.CustomScalarsPlugin(tb).layout_impl(ctx, ""))
    (category,) = merged["category"]
    assert category["title"] == CATEGORY
    titles = [c["title"] for c in category["chart"]]
    assert titles == [
        "eval success, every task",
        "aggregator weights",
        "gradient conflicts and speed",
        "gradient conflicts",
        "speed",
    ]
    success = category["chart"][0]["multiline"]["tag"]
    assert success == [f"^eval/success/{t}$" for t in TASKS]
