"""`morl bench aggregators --against torchjd`: paired timings of our methods and TorchJD's."""

import json

import pytest
import torch

from morl.runners.cli import main


def test_bench_against_torchjd_quick(tmp_path, capsys):
    """`--against torchjd --quick`: every registered method TorchJD also has, side by side on
    tiny sizes, with the option mapping printed (no timing assertions)."""
    from morl.runners.bench.torchjd import QUICK_D, QUICK_K, paired_methods

    out, threads = tmp_path / "against.json", torch.get_num_threads()
    assert main(["bench", "aggregators", "--against", "torchjd", "--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        "1 thread(s)" in printed
        and torch.get_num_threads() == threads
        and "reduction='sum'" in printed
        and "rescale=0" in printed
    )
    names = [name for name, _, _ in paired_methods()]
    assert {"mgda", "cagrad", "pcgrad"} <= set(names)
    rows = json.loads(out.read_text())["rows"]
    assert {(r["method"], r["K"], r["D"]) for r in rows} == {(m, k, d) for m in names for k in QUICK_K for d in QUICK_D}
    for r in rows:
        assert "error" in r or (
            r["ms"] > 0 and r["torchjd_ms"] > 0 and r["verdict"] == ("ok" if r["ratio"] <= 1.1 else "OVER")
        ), r
        if "ratio" in r:  # the floor: the two passes' time over TorchJD's
            assert r["floor"] == pytest.approx((r["gemm_ms"] + r["wj_ms"]) / r["torchjd_ms"])
    timed = {r["method"] for r in rows if "ratio" in r}
    assert {"mgda", "cagrad", "pcgrad"} <= timed
    # the mapped options make both compute the same direction, up to TorchJD's solver accuracy
    # (MGDA: Frank-Wolfe stopped at eps = 1e-3, measured 2.7e-3 at K = 5; CAGrad: cvxpy, 2e-6)
    bound = {"mgda": 1e-2, "cagrad": 1e-4}
    assert all(r["rel_diff"] < bound[r["method"]] for r in rows if r["method"] in bound)


def test_bench_against_torchjd_method_filter(tmp_path, capsys):
    """`--methods` and `--ks` restrict the side-by-side table to the chosen cells."""
    out = tmp_path / "against.json"
    args = [
        "bench",
        "aggregators",
        "--against",
        "torchjd",
        "--quick",
        "--methods",
        "mgda,upgrad",
        "--ks",
        "3",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["method"], r["K"]) for r in rows} == {("mgda", 3), ("upgrad", 3)}
    capsys.readouterr()
    assert main(["bench", "aggregators", "--against", "torchjd", "--quick", "--methods", "nope"]) == 2
    assert "--methods: nope not valid" in capsys.readouterr().err
    assert main(["bench", "aggregators", "--methods", "mgda"]) == 2
    assert "--methods applies with --against or to `morl bench scale` (not --growth) only" in capsys.readouterr().err


def test_floor_is_the_two_passes_over_the_peers_call_and_the_summary_counts_cells_over_the_guard():
    from morl.runners.bench.torchjd import _with_floor, summary

    base = {"method": "mgda", "K": 10, "D": 10**6, "ms": 12.0, "torchjd_ms": 10.0, "ratio": 1.2, "verdict": "OVER"}
    over = _with_floor(base | {"gemm_ms": 5.5, "wj_ms": 1.0})
    met = _with_floor(base | {"ms": 6.0, "ratio": 0.6, "verdict": "ok", "gemm_ms": 4.5, "wj_ms": 1.0})
    assert over["floor"] == pytest.approx(0.65) and met["floor"] == pytest.approx(0.55)
    assert summary([over, met]) == "2 cells timed, 1 above 1.1x; worst mgda K=10 D=1000000: 1.20x"


def test_bench_against_torchjd_sizes(tmp_path, capsys):
    """`--ds` picks the matrix widths (MT10's actor: D = 344008); bad sizes get one line."""
    out = tmp_path / "against.json"
    args = [
        "bench",
        "aggregators",
        "--against",
        "torchjd",
        "--quick",
        "--methods",
        "mgda",
        "--ks",
        "2",
        "--ds",
        "300,2e3",
    ]
    assert main([*args, "--out", str(out)]) == 0
    assert sorted(r["D"] for r in json.loads(out.read_text())["rows"]) == [300, 2000]
    capsys.readouterr()
    for bad in ("0", "1.5e1.2", "x", "2.5"):
        assert main([*args[:-1], bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--ds" in err and repr(bad) in err, err
    assert main(["bench", "aggregators", "--ds", "1e4"]) == 2
    assert "--ds applies with --against only" in capsys.readouterr().err
