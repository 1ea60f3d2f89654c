"""Per-module mutation score from mutmut's result files (mutants/<module>/mutants/**/*.py.meta).

Usage: python tools/mutation_score.py [MODULE] [--survivors]
MODULE is a path prefix such as morl/solvers or morl/gradients.py; --survivors also lists
the surviving mutants (inspect one with `mutmut show NAME`).
score = killed / (killed + survived): mutants with no covering test or not yet run are
counted apart (columns 'no test' and 'other': not run yet, or suspicious), so a partial
run does not read as a high score.
"""

import json
import sys
from pathlib import Path

# The groups docs/testing.md reports; a file belongs to the first prefix it starts with.
MODULES = (
    "morl/gradients.py",
    "morl/solvers",
    "morl/aggregators",
    "agents/rl/mtsac.py",
    "agents/federated",
)
# mutmut's exit codes (mutmut/stats.py): 1 and 3 are kills, 0 a survivor.
KILLED, SURVIVED, NO_TESTS = {1, 3}, {0}, {5, 33}
TIMEOUT = {36, 24, -24, 152, 255}


def module_of(path: str) -> str:
    return next((m for m in MODULES if path.startswith(m)), path)


def repo_path(path: str) -> str:
    """The checkout's path of a mutated file: tools/mutate.py keeps agents/, envs/ and runners/
    under the scratch morl/ (they install as morl.agents, ...), so morl/agents/x -> agents/x."""
    head, _, rest = path.partition("/")
    sub = rest.split("/")[0]
    return rest if head == "morl" and sub in ("agents", "envs", "runners") else path


def collect(prefix: str) -> dict:
    rows: dict = {}
    # tools/mutate.py keeps one mutmut work tree per module: mutants/<module>/mutants/<path>.meta
    for meta in sorted(Path("mutants").glob("*/mutants/**/*.py.meta")):
        path = repo_path(str(meta.relative_to(meta.parents[len(meta.parents) - 4]))[: -len(".meta")])
        if prefix and not path.startswith(prefix):
            continue
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        row = rows.setdefault(module_of(path), {"mutants": 0, "killed": 0, "survived": 0, "no test": 0, "other": 0, "names": []})
        for name, code in codes.items():
            row["mutants"] += 1
            if code in KILLED or code in TIMEOUT:  # a mutant that hangs the tests is caught too
                row["killed"] += 1
            elif code in SURVIVED:
                row["survived"] += 1
                row["names"].append(name)
            elif code in NO_TESTS:  # no selected test reaches the mutated function
                row["no test"] += 1
            else:  # not run yet, or suspicious
                row["other"] += 1
    return rows


def main(argv: list[str]) -> int:
    prefix = next((a.rstrip("/") for a in argv if not a.startswith("--")), "")
    rows = collect(prefix)
    if not rows:
        print(f"no mutmut results under mutants/ for {prefix or 'any module'}: run `make mutate` first")
        return 1
    print(f"{'module':<20} {'mutants':>7} {'killed':>6} {'survived':>8} {'no test':>7} {'other':>5} {'score':>6}")
    for module, r in rows.items():
        tried = r["killed"] + r["survived"]
        score = f"{100 * r['killed'] / tried:5.1f}%" if tried else "   n/a"
        print(f"{module:<20} {r['mutants']:>7} {r['killed']:>6} {r['survived']:>8} {r['no test']:>7} {r['other']:>5} {score:>6}")
        if "--survivors" in argv:
            for name in sorted(r["names"]):
                print(f"    survived: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
