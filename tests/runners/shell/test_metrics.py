"""Writing an experiment's metrics (runners/shell/metrics.py): values read back to plain floats at
any depth, scalars to TensorBoard as ``tag/name``, every value to metrics.jsonl, figures as images."""

import math

import numpy as np
import torch

from morl.runners.shell.metrics import resolve, write


def test_metrics_are_read_back_at_any_depth_and_ints_stay_ints():
    import numpy as np
    import torch

    from morl.runners.shell.metrics import resolve

    out = resolve(
        {
            "a": torch.tensor(0.5),
            "b": {"c": {"d": torch.tensor([1.0, 2.0])}},
            "n": 3,
            "flag": True,
            "e": np.float32(0.25),
            "f": [torch.tensor(1.0), torch.tensor(2.0)],
            "s": "x",
        }
    )
    assert out == {"a": 0.5, "b": {"c": {"d": [1.0, 2.0]}}, "n": 3, "flag": True, "e": 0.25, "f": [1.0, 2.0], "s": "x"}
    assert type(out["n"]) is int and type(out["a"]) is float


class FakeLogger:
    """What ``write`` uses of RunLogger: ``writer.add_scalar``, ``writer.add_figure`` and ``record``."""

    def __init__(self):
        self.scalars, self.figures, self.records = [], [], []
        self.writer = self

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))

    def add_figure(self, tag, figure, step, close=True):
        self.figures.append((tag, figure, step, close))

    def record(self, step, **values):
        self.records.append((step, values))


def test_write_logs_finite_numbers_as_nested_tags_and_records_every_value():
    logger = FakeLogger()
    figure = object()
    values = write(
        logger,
        7,
        "eval",
        {
            "eval/success": {"a": torch.tensor(0.5), "b": 1.0, "mean": np.float64(0.75)},
            "loss": torch.tensor(float("nan")),
            "grad": {"norm": {"pre": 2.0, "post": float("inf")}},
            "count": 3,
            "flag": True,
            "vector": torch.tensor([1.0, 2.0]),
            "figures": {"eval/front": figure},
        },
    )
    assert logger.scalars == [
        ("eval/success/a", 0.5, 7),
        ("eval/success/b", 1.0, 7),
        ("eval/success/mean", 0.75, 7),
        ("grad/norm/pre", 2.0, 7),
        ("count", 3.0, 7),
    ]  # NaN, inf, the bool and the vector stay out of TensorBoard
    assert logger.figures == [("eval/front", figure, 7, False)]
    assert "figures" not in values and math.isnan(values["loss"]) and values["vector"] == [1.0, 2.0]
    ((step, recorded),) = logger.records
    assert step == 7 and recorded == {"kind": "eval", **values}
    assert values["grad"] == {"norm": {"pre": 2.0, "post": math.inf}} and values["flag"] is True


def test_resolve_flattens_arrays_and_keeps_none_and_unknown_objects():
    marker = object()
    out = resolve({"m": np.array([[1, 2], [3, 4]]), "one": np.array([[5.0]]), "none": None, "obj": marker})
    assert out == {"m": [1.0, 2.0, 3.0, 4.0], "one": 5.0, "none": None, "obj": marker}
    assert type(out["one"]) is float
