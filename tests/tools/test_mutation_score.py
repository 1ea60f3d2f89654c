"""tools/mutation_score.py: the whole core's score from full or sampled modules."""

import importlib.util
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))  # the tool imports its sibling tools/mutate.py
SPEC = importlib.util.spec_from_file_location("mutation_score", TOOLS / "mutation_score.py")
tool = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tool)
sys.path.remove(str(TOOLS))


def row(mutants, killed, survived, no_test=0):
    return {"mutants": mutants, "killed": killed, "survived": survived, "no test": no_test}


def test_a_full_run_is_the_share_killed_with_no_interval():
    mean, half = tool.stratified([row(50, 45, 3, 2), row(150, 150, 0)])
    assert mean == pytest.approx(195 / 200) and half == 0.0


def test_samples_are_weighted_by_module_size_with_a_corrected_interval():
    """Sizes 100 and 300, 10 drawn from each, 9 and 10 killed: 0.975; var = 0.25² · 0.09/10 · 0.9."""
    mean, half = tool.stratified([row(100, 9, 1), row(300, 10, 0)])
    assert mean == pytest.approx(0.975)
    assert half == pytest.approx(1.96 * (0.25**2 * 0.09 / 10 * 0.9) ** 0.5)
