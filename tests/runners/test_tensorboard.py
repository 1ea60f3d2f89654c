"""The run logger (runners/tensorboard.py): TensorBoard scalars read back with TensorBoard's own
reader, one ``metrics.jsonl`` line per record compared with its literal text, hyperparameters as
a text table and an HParams session per run (read back through TensorBoard's plugin backends)."""

import json
import math

import numpy as np
import pytest
import torch

from morl.runners import tensorboard
from morl.runners.tensorboard import RunLogger, flatten_config
from tests.runners.test_tb_layout import _backend, _fake_rl_run


def _accumulator(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def _scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
    acc = _accumulator(run_dir)
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_scalars_and_per_task_values_reach_tensorboard_under_their_tags(tmp_path):
    log = RunLogger(tmp_path)
    assert log.scalar("perf/updates_per_s", torch.tensor([2.5, 9.0]), 10) == 2.5  # the first element
    logged = log.per_task("eval/success", torch.tensor([0.0, 0.5, 1.0, 0.25]), ["a", "b", "c", "d"], 10)
    assert logged == {"a": 0.0, "b": 0.5, "c": 1.0, "d": 0.25, "mean": 0.4375}
    assert log.per_task("aggregator/weight", np.array([0.75, 0.25]), ["a", "b"], 20, mean=False) == {
        "a": 0.75,
        "b": 0.25,
    }
    log.close()
    assert _scalars(tmp_path) == {
        "perf/updates_per_s": [(10, 2.5)],
        "eval/success/a": [(10, 0.0)],
        "eval/success/b": [(10, 0.5)],
        "eval/success/c": [(10, 1.0)],
        "eval/success/d": [(10, 0.25)],
        "eval/success/mean": [(10, 0.4375)],
        "aggregator/weight/a": [(20, 0.75)],
        "aggregator/weight/b": [(20, 0.25)],
    }


def test_per_task_values_must_match_the_task_names(tmp_path):
    log = RunLogger(tmp_path)
    try:
        with pytest.raises(ValueError, match=r"^eval/success: got 3 values for 4 tasks$"):
            log.per_task("eval/success", [0.1, 0.2, 0.3], ["a", "b", "c", "d"], 1)
    finally:
        log.close()


def test_a_record_is_one_json_line_with_arrays_as_lists_and_non_finite_values_as_null(tmp_path, monkeypatch):
    monkeypatch.setattr(tensorboard.time, "time", lambda: 1234.5)
    log = RunLogger(tmp_path)
    log.record(
        7,
        kind="train",
        loss=torch.tensor([0.5, float("nan")]),
        one=np.array([2.0]),
        rate=float("inf"),
        per_task={"a": math.nan, "b": [1, -math.inf]},
        note=None,
        numpy_scalars=[np.float32(0.25), np.int64(3), np.float64(np.nan)],
    )
    log.record(np.int64(8), kind="eval")
    log.close()
    assert (tmp_path / "metrics.jsonl").read_text() == (
        '{"step": 7, "time": 1234.5, "kind": "train", "loss": [0.5, null], "one": 2.0, "rate": null, '
        '"per_task": {"a": null, "b": [1, null]}, "note": null, "numpy_scalars": [0.25, 3, null]}\n'
        '{"step": 8, "time": 1234.5, "kind": "eval"}\n'
    )


def test_a_second_logger_on_the_same_run_appends_to_its_records(tmp_path):
    for step in (1, 2):
        log = RunLogger(tmp_path)
        log.record(step)
        log.close()
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_a_resumed_logger_hides_the_events_logged_after_its_restart_step(tmp_path):
    log = RunLogger(tmp_path)
    for step in (10, 20, 30):
        log.scalar("loss", float(step), step)
    log.close()
    # the checkpoint the run restarts from is at step 20; its next log point is 25, so only the purge
    # step, not TensorBoard's own dropping of steps that go backwards, hides step 20
    log = RunLogger(tmp_path, purge_step=20)
    for step in (25, 40):
        log.scalar("loss", step + 0.5, step)
    log.close()
    assert _scalars(tmp_path)["loss"] == [(10, 10.0), (25, 25.5), (40, 40.5)]


def test_hyperparameters_are_a_markdown_table_of_the_flat_config(tmp_path):
    log = RunLogger(tmp_path)
    log.hparams({"agent.lr": 0.001, "env.name": "mt10", "agent.hidden": [8, 8]})
    log.close()
    (event,) = _accumulator(tmp_path).Tensors("config/text_summary")
    assert event.tensor_proto.string_val[0].decode() == (
        "| key | value |\n|---|---|\n| agent.lr | 0.001 |\n| env.name | mt10 |\n| agent.hidden | [8, 8] |"
    )


def test_flatten_config_joins_nested_keys_with_dots_and_keeps_empty_sections():
    cfg = {"agent": {"lr": 1e-3, "optim": {"betas": [0.9, 0.999]}}, "options": {}, "seed": None}
    assert flatten_config(cfg) == {"agent.lr": 1e-3, "agent.optim.betas": [0.9, 0.999], "options": {}, "seed": None}
    assert flatten_config({"a": {"b": 1}}, prefix="run.") == {"run.a.b": 1}


# ---- HParams (moved from tests/runners/test_tb_layout.py)


def test_hparams_view_has_one_session_per_run_with_its_final_metrics(tmp_path):
    from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups

    _fake_rl_run(tmp_path / "a", "cagrad", 0.5)
    _fake_rl_run(tmp_path / "b", "mgda", 0.25)
    _, tb, ctx = _backend(tmp_path)
    statuses = [api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE, api_pb2.STATUS_RUNNING]
    request = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=10, allowed_statuses=statuses)
    response = list_session_groups.Handler(ctx, backend_context.Context(tb), "", request).run()
    groups = {g.name: g for g in response.session_groups}
    assert sorted(groups) == ["a/tb/hparams", "b/tb/hparams"]
    for name, aggregator, success in (("a/tb/hparams", "cagrad", 0.5), ("b/tb/hparams", "mgda", 0.25)):
        (session,) = groups[name].sessions
        assert session.status == api_pb2.STATUS_SUCCESS
        assert groups[name].hparams["aggregator.name"].string_value == aggregator
        values = {m.name.tag: m.value for m in session.metric_values}
        assert values == pytest.approx({"final/eval/success/mean": success, "final/step": 200.0})


def test_hparams_columns_are_the_union_of_every_run_s_keys(tmp_path):
    from tensorboard.data import provider
    from tensorboard.plugins.hparams import backend_context

    _fake_rl_run(tmp_path / "a", "cagrad", 0.5)  # has aggregator.options.c
    _fake_rl_run(tmp_path / "b", "mgda", 0.25)  # has aggregator.options (empty)
    _, tb, ctx = _backend(tmp_path)
    bc = backend_context.Context(tb)
    meta = bc.hparams_metadata(ctx, "")
    empty = provider.ListHyperparametersResult(hyperparameters=[], session_groups=[])
    experiment = bc.experiment_from_metadata(ctx, "", True, meta, empty)
    columns = {h.name for h in experiment.hparam_infos}
    assert {"aggregator.name", "aggregator.options.c", "aggregator.options", "run.seed"} <= columns
    assert {m.name.tag for m in experiment.metric_infos} == {"final/eval/success/mean", "final/step"}
