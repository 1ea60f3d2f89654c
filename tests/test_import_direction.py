"""Imports point one way: runners -> agents/envs -> morl core; never sideways between agents and
envs, never up.

Read from the source (ast), so the check needs no import side effects. Imports under
``if TYPE_CHECKING:`` count too: a learner names the data it reads by a Protocol of its own.
"""

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE_SUBPACKAGES = ("morl.agents", "morl.envs", "morl.runners")


@functools.cache  # each file is parsed once for all the checks
def _imports(path: Path) -> frozenset[str]:
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return frozenset(out)


def _imports_of(folder: str, target: str) -> set[tuple[str, str]]:
    return {
        (str(p.relative_to(ROOT)), m)
        for p in (ROOT / folder).rglob("*.py")
        for m in _imports(p)
        if m == target or m.startswith(target + ".")
    }


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("envs", "morl.agents"),
        ("envs", "morl.runners"),
        ("agents", "morl.envs"),
        ("agents", "morl.runners"),
    ],
)
def test_no_sideways_or_upward_import(folder, forbidden):
    assert _imports_of(folder, forbidden) == set()


def test_the_core_imports_neither_learners_nor_envs_nor_runners():
    found = {hit for sub in CORE_SUBPACKAGES for hit in _imports_of("morl", sub)}
    assert found == set()


@pytest.mark.parametrize("old", ["agents", "envs", "runners"])
def test_nothing_imports_the_repository_folders_as_top_level_packages(old):
    # They install as morl.agents / morl.envs / morl.runners (pyproject.toml's package-dir).
    hits = {
        hit for folder in ("morl", "agents", "envs", "runners", "tests", "tools") for hit in _imports_of(folder, old)
    }
    assert hits == set()


def test_imports_under_type_checking_and_in_functions_count(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\nimport a\nif TYPE_CHECKING:\n    import b\ndef f():\n    from c.d import e\n"
    )
    assert _imports(src) == {"typing", "a", "b", "c.d"}
