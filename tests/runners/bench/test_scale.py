"""``morl bench scale``: the models have the sizes the docs quote, every cell reports a time and a
peak relative to the plain step, and the target is registered."""

import pytest

from morl.runners.bench import command, scale


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_full_models_have_about_36m_shared_parameters(model):
    trunk, heads, x, y = scale.build(model, quick=False, k=3)
    d = sum(p.numel() for p in trunk.parameters())
    assert 34e6 < d < 38e6
    assert len(heads) == 3 and y.shape == (x.shape[0], 3)


def test_quick_cells_report_time_and_memory_relative_to_plain():
    rows = scale.measure(True, ks=(2,), models=("mlp",), methods=("plain", "gramian", "features"))
    assert [r["method"] for r in rows] == ["plain", "gramian", "features"]
    for r in rows:
        assert "error" not in r, r
        assert r["seconds"] > 0 and r["peak_bytes"] >= 0 and r["threads"] >= 1
        assert r["time_ratio"] == pytest.approx(r["seconds"] / rows[0]["seconds"])
    assert rows[0]["time_ratio"] == 1.0
    table = scale.format_table(rows)
    assert "| mlp |" in table and "gramian" in table and "× plain" in table


def test_rows_cells_too_big_for_memory_are_skipped_not_run():
    rows = scale.measure(True, ks=(2,), models=("mlp",), methods=("rows",), max_gb=1e-6)
    assert rows[0]["error"].startswith("skipped: [K, D] matrix")


def test_scale_is_a_bench_target():
    assert command.TARGETS["scale"] == "morl.runners.bench.scale"
