"""tools/mutate.py picks, for each core file, the fast tests that cover it."""

import importlib.util
import json
import os
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("mutate", Path(__file__).resolve().parents[2] / "tools" / "mutate.py")
tool = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tool)


def test_a_method_runs_its_mirror_and_its_rows_of_the_cross_method_suites():
    files, tests = tool.MODULES["morl/aggregators/epo_al.py"]
    assert files == ["morl/aggregators/epo_al.py"]
    assert tests[0] == "tests/aggregators/test_epo_al.py"
    assert tests[-2:] == ["-k", "epo_al"]
    assert {"tests/aggregators/test_checks.py", "tests/aggregators/test_properties.py"} <= set(tests)
    assert "tests/aggregators/test_cagrad.py" not in tests  # another method's mirror
    assert "tests/aggregators/test_update_compiles.py" not in tests  # Dynamo cannot trace mutmut's trampolines


def test_a_solver_runs_the_mirrors_of_the_core_files_importing_it():
    _, tests = tool.MODULES["morl/solvers/priority_qp.py"]
    assert tests == ["tests/solvers/test_priority_qp.py", "tests/aggregators/test_pcd.py"]


def test_every_core_file_is_a_module_with_tests():
    core = {str(p.relative_to(tool.ROOT)) for d in tool.CORE for p in (tool.ROOT / d).glob("*.py")}
    assert {p for p in core if not p.endswith("__init__.py")} <= set(tool.MODULES)
    assert all(tests for _, tests in tool.MODULES.values())


def test_a_sample_is_the_same_draw_each_run_less_the_mutants_with_a_verdict(monkeypatch):
    codes = {f"m.f__mutmut_{i}": None for i in range(1, 41)}
    monkeypatch.setattr(tool, "results", lambda module: codes)
    first = tool.sample("morl/solvers/simplex.py", 10)
    assert len(first) == 10 and set(first) <= set(codes)
    assert tool.sample("morl/solvers/simplex.py", 10) == first
    codes[first[0]], codes[first[1]] = 1, 0  # killed, survived
    assert tool.sample("morl/solvers/simplex.py", 10) == first[2:]
    assert sorted(tool.sample("morl/solvers/simplex.py", 100)) == sorted(k for k, v in codes.items() if v is None)


def test_survivors_and_unreached_are_retried_only_when_the_tests_change(tmp_path, monkeypatch):
    meta = tmp_path / "mutants" / "morl/solvers/simplex.py.meta"
    stats = tmp_path / "mutants" / "mutmut-stats.json"
    meta.parent.mkdir(parents=True)
    verdicts = {"killed": 1, "survived": 0, "no_tests": 33, "not_run": None}
    fingerprint = "a"
    monkeypatch.setattr(tool, "tests_fingerprint", lambda: fingerprint)

    def forget():
        meta.write_text(json.dumps({"exit_code_by_key": verdicts}))
        stats.write_text("{}")
        tool.forget_survivors_if_tests_changed(tmp_path, ["morl/solvers/simplex.py"])
        return json.loads(meta.read_text())["exit_code_by_key"], stats.exists()

    forgotten = ({"killed": 1, "survived": None, "no_tests": None, "not_run": None}, False)
    assert forget() == forgotten  # first sight of the tests
    assert forget() == (verdicts, True)
    fingerprint = "b"
    assert forget() == forgotten


def test_the_tests_fingerprint_reads_contents_not_times(tmp_path, monkeypatch):
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    test = tmp_path / "tests" / "test_x.py"
    test.parent.mkdir()
    test.write_text("assert 1\n")
    os.utime(test, (0, 0))
    before = tool.tests_fingerprint()
    test.write_text("assert 2\n")
    os.utime(test, (0, 0))
    assert tool.tests_fingerprint() != before
    test.write_text("assert 1\n")
    assert tool.tests_fingerprint() == before
