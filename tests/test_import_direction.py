"""Imports point one way: runners -> agents/envs -> morl; never envs -> agents, never agents -> envs.

Read from the source (ast), so the check needs no import side effects. KNOWN lists the sideways
imports that remain until the layout rework; the list may only shrink.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KNOWN = {
    ("agents/sb3.py", "envs"),  # inside _main(): `python -m agents.sb3`, the side command line, not the learner
    ("agents/federated/simulator.py", "envs.fl_data"),
    ("agents/federated/flower_engine.py", "envs.fl_data"),
    ("agents/hypercleaning.py", "envs.supervised_data"),
}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _sideways(package: str, other: str) -> set[tuple[str, str]]:
    return {
        (str(p.relative_to(ROOT)), m)
        for p in (ROOT / package).rglob("*.py")
        for m in _imports(p)
        if m == other or m.startswith(other + ".")
    }


def test_envs_never_import_agents():
    assert _sideways("envs", "agents") == set()


def test_agents_import_envs_only_where_still_known():
    assert _sideways("agents", "envs") <= KNOWN


def test_the_core_imports_neither():
    assert _sideways("morl", "agents") | _sideways("morl", "envs") | _sideways("morl", "runners") == set()
