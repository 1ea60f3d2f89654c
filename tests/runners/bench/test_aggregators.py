"""`morl bench aggregators --quick` runs in-process (through the `morl` CLI) and reports every method."""

import json

import pytest
import torch

from morl.aggregators import available
from morl.runners.cli import main


def test_bench_aggregators_quick(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "aggregators", "--quick", "--device", "cpu", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    methods = available() + ["moco+cagrad"]
    table = printed.split("Aggregator call")[1].split("MT10-sized actor")[0]
    for name in methods:
        assert any(line.split()[:1] == [name] for line in table.splitlines()), f"{name} missing from the table"
    result = json.loads(out.read_text())
    cells = {(r["method"], r["K"], r["D"]) for r in result["aggregators"]}
    assert cells == {(m, k, 10_000) for m in methods for k in (2, 10)}
    assert all(r["ms"] > 0 for r in result["aggregators"])
    actor = result["actor"]
    assert {r["strategy"] for r in actor["rows"]} == {"batched", "jacobian", "loop"}
    assert all(r["ratio"] > 0 for r in actor["rows"]) and actor["params"] == 344_008


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_bench_rejects_missing_cuda(capsys):
    assert main(["bench", "aggregators", "--quick", "--device", "cuda"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
