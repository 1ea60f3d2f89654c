"""Mutation testing of the numerical core, one source file at a time (`make mutate [MODULE=...]`).

Each file is mutated against the fast tests that cover it, found by rule (``--list`` prints them):
its mirrored test module (morl/solvers/min_norm.py -> tests/solvers/test_min_norm.py, a leading
underscore dropped); for a method (a REGISTRY name in morl/aggregators/__init__.py) also the rows
of the cross-method suites in tests/aggregators naming it (``-k cagrad`` selects
``test_finite_for_every_finite_input[dtype0-cagrad]``); for a helper (a solver, a private module,
loss_weighting.py) also the mirrored tests of the core files importing it. base.py: its mirror
only, test_base.py runs every method. mutmut 3 reads one config per directory, so each module
gets a scratch directory ``mutants/<module>/``: links to the sources and a pyproject.toml with its
``[tool.mutmut]``. Results persist there. Scores: ``python tools/mutation_score.py``.

Usage: python tools/mutate.py [MODULE ...] [--jobs N] [--sample N] [--list]   (MODULE: a key or a path prefix)

--sample N runs N mutants per module drawn at random (all of a smaller module): an estimate of the
score in a fraction of the time (the core has thousands of mutants at seconds each).
"""

import ast
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

from morl.aggregators import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
CORE = ("morl/aggregators", "morl/solvers")
NAMESPACED = ("agents", "envs", "runners")  # installed as morl.agents, ...: the scratch morl/ holds them
FEDERATED = ["agents/federated/strategies.py", "agents/federated/client.py"]


def mirror(path: str) -> str:
    """morl/solvers/min_norm.py -> tests/solvers/test_min_norm.py; agents/rl/x.py -> tests/agents/rl/test_x.py."""
    parts = Path(path).parts[1:] if path.startswith("morl/") else Path(path).parts
    return str(Path("tests", *parts[:-1], "test_" + parts[-1].lstrip("_")))


def existing(paths) -> list[str]:
    return [p for p in dict.fromkeys(map(str, paths)) if (ROOT / p).is_file()]


def imported_modules(path: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def build_modules() -> dict[str, tuple[list[str], list[str]]]:
    """key -> (files to mutate, test files and pytest options)."""
    core = sorted(str(p.relative_to(ROOT)) for d in CORE for p in (ROOT / d).glob("*.py") if p.name != "__init__.py")
    methods = {f"morl/aggregators/{name}.py": name for name in REGISTRY}  # each module is named after its key
    suites = existing(sorted(p.relative_to(ROOT) for p in (ROOT / "tests/aggregators").glob("test_*.py")))
    # Dynamo cannot trace mutmut's trampolines (they read a ContextVar): the compile suite stays out
    cross = [t for t in suites if t not in map(mirror, methods) and t != "tests/aggregators/test_update_compiles.py"]
    imports = {path: imported_modules(path) for path in core}
    modules = {}
    for path in core:
        if path in methods:
            tests = [*existing([mirror(path), *cross]), "-k", methods[path]]
        elif path == "morl/aggregators/base.py":
            tests = existing([mirror(path)])
        else:
            dotted = path[:-3].replace("/", ".")
            # the aggregators' private helpers also check options, whose messages test_checks.py pins for every method
            checks = ["tests/aggregators/test_checks.py"] if path.startswith("morl/aggregators/_") else []
            tests = existing([mirror(path), *checks] + [mirror(p) for p in core if dotted in imports[p]])
        modules[path] = ([path], tests)
    for path in ("morl/gradients.py", "agents/rl/mtsac.py"):
        modules[path] = ([path], existing([mirror(path)]))
    federated = existing(sorted(p.relative_to(ROOT) for p in (ROOT / "tests/agents/federated").glob("test_*.py")))
    modules["agents/federated"] = (FEDERATED, federated)
    return modules


MODULES = build_modules()


def scratch_dir(module: str) -> Path:  # mutants/morl_solvers_gramian.py
    return ROOT / "mutants" / module.replace("/", "_")


def scratch_path(path: str) -> str:
    """A repository path as the scratch tree holds it: agents/rl/mtsac.py -> morl/agents/rl/mtsac.py."""
    return f"morl/{path}" if path.split("/")[0] in NAMESPACED else path


def prepare(module: str) -> Path:
    """Links to tests/, configs/ and each entry of morl/ (agents/, envs/, runners/ inside it, where
    ``import morl.agents`` finds mutmut's copy), each a source path: mutmut's walk skips linked folders."""
    mutate, tests = MODULES[module]
    scratch = scratch_dir(module)
    (scratch / "morl").mkdir(parents=True, exist_ok=True)
    targets = {e.name: e for e in (ROOT / "morl").iterdir() if e.name != "__pycache__"}
    targets.update({name: ROOT / name for name in NAMESPACED})
    links = {scratch / "tests": ROOT / "tests", scratch / "configs": ROOT / "configs"}
    links.update({scratch / "morl" / name: target for name, target in targets.items()})
    for old in [*(scratch / "morl").iterdir(), scratch / "tests", scratch / "configs"]:
        if old.is_symlink():  # relinked below: the checkout may have moved or lost entries
            old.unlink()
    for at, target in links.items():
        at.symlink_to(target)
    # raise lines are input checks, pinned by the error tests' messages, not by the maths
    section = f"""
[tool.mutmut]
source_paths = {json.dumps([f"morl/{name}" for name in sorted(targets)])}
only_mutate = {json.dumps([scratch_path(m) for m in mutate])}
also_copy = ["configs"]
do_not_mutate_patterns = ['^\\s*raise ']
pytest_add_cli_args = ["-p", "no:cacheprovider"]
pytest_add_cli_args_test_selection = {json.dumps(tests)}
"""
    (scratch / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + section)
    forget_survivors_if_tests_changed(scratch, mutate)
    return scratch


def forget_survivors_if_tests_changed(scratch: Path, mutate: list[str]) -> None:
    """mutmut keeps its map of tests to functions and its verdicts when tests change: after an edit
    anywhere in tests/ (shared checks included), map them anew and retry the survivors and the
    unreached. Contents, not mtimes: `git archive` stamps every file with the commit's time."""
    seen, now = scratch / "tests.sha256", tests_fingerprint()
    if seen.exists() and seen.read_text() == now:
        return
    (scratch / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    for meta in (scratch / "mutants" / (scratch_path(m) + ".meta") for m in mutate):
        if meta.exists():
            data = json.loads(meta.read_text())
            data["exit_code_by_key"] = {k: None if v in (0, 5, 33) else v for k, v in data["exit_code_by_key"].items()}
            meta.write_text(json.dumps(data))
    seen.write_text(now)


def tests_fingerprint() -> str:
    digest = hashlib.sha256()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def results(module: str) -> dict[str, int | None]:
    """mutmut's verdict per mutant of ``module`` (None: not run), from its result files."""
    out = {}
    for path in MODULES[module][0]:
        meta = scratch_dir(module) / "mutants" / (scratch_path(path) + ".meta")
        if meta.exists():
            out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def sample(module: str, n: int) -> list[str]:
    """``n`` of the module's mutants drawn at random, seeded by the module's name (the same draw on
    every run while the source stays), less those with a verdict."""
    codes = results(module)
    drawn = random.Random(module).sample(sorted(codes), min(n, len(codes)))
    return [name for name in drawn if codes[name] is None]


def option(argv: list[str], flag: str, default: str) -> tuple[str, list[str]]:
    if flag not in argv:
        return default, argv
    i = argv.index(flag)
    return argv[i + 1], argv[:i] + argv[i + 2 :]


def main(argv: list[str]) -> int:
    jobs, argv = option(argv, "--jobs", "2")
    n, argv = option(argv, "--sample", "0")
    wanted = [m.rstrip("/") for m in argv if m != "--list"]
    # in the order asked for (each prefix's modules in MODULES' order)
    modules = list(
        dict.fromkeys(m for w in wanted or [""] for m in MODULES if not w or m == w or m.startswith(w + "/"))
    )
    if not modules:
        print(f"mutate: no module matches {wanted}; choose from {', '.join(MODULES)}", file=sys.stderr)
        return 2
    if "--list" in argv:
        print("\n".join(f"{m}: {' '.join(MODULES[m][1])}" for m in modules))
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MORL_FORK_SAFE_SOLVERS": "1"}  # tests/conftest.py
    run = [str(Path(sys.executable).parent / "mutmut"), "run", "--max-children", jobs]
    for module in modules:
        if not MODULES[module][1]:
            print(f"mutate: {module} has no test file (expected {mirror(module)}); skipped", file=sys.stderr)
            continue
        print(f"== {module}", flush=True)
        scratch = prepare(module)
        names = []
        if int(n):
            # mutmut makes the mutants and maps tests to functions before it filters by name: a name
            # that matches nothing does just that (and exits 1), then the draw runs
            subprocess.call([*run, "no-such-mutant"], cwd=scratch, env=env, stdout=subprocess.DEVNULL)
            names = sample(module, int(n))
            if not names:
                continue
        rc = subprocess.call([*run, *names], cwd=scratch, env=env)
        if rc != 0:
            print(f"mutate: mutmut failed on {module} (exit {rc})", file=sys.stderr)
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
