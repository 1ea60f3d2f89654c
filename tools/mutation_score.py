"""Mutation score per module of tools/mutate.py, from mutmut's result files
(mutants/<module>/mutants/<file>.py.meta).

Usage: python tools/mutation_score.py [MODULE] [--survivors]
MODULE is a key of tools/mutate.py's MODULES or a path prefix (morl/solvers); --survivors also
lists the surviving mutants (inspect one with `mutmut show NAME` inside mutants/<module>/).
score = killed / (killed + survived): mutants with no covering test or not yet run are
counted apart (columns 'no test' and 'other': not run yet, or suspicious), so a partial
run does not read as a high score.
"""

import json
import sys

from mutate import MODULES, scratch_dir, scratch_path

# mutmut's exit codes (mutmut/stats.py): 1 and 3 are kills, 0 a survivor.
KILLED, SURVIVED, NO_TESTS = {1, 3}, {0}, {5, 33}
TIMEOUT = {36, 24, -24, 152, 255}


def collect(prefix: str) -> dict:
    rows: dict = {}
    for module, (files, _) in MODULES.items():
        if prefix and not (module == prefix or module.startswith(prefix + "/")):
            continue
        for path in files:
            meta = scratch_dir(module) / "mutants" / (scratch_path(path) + ".meta")
            if not meta.exists():
                continue
            codes = json.loads(meta.read_text())["exit_code_by_key"]
            row = rows.setdefault(
                module, {"mutants": 0, "killed": 0, "survived": 0, "no test": 0, "other": 0, "names": []}
            )
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
    width = max(len("module"), *map(len, rows))
    print(f"{'module':<{width}} {'mutants':>7} {'killed':>6} {'survived':>8} {'no test':>7} {'other':>5} {'score':>6}")
    for module, r in rows.items():
        tried = r["killed"] + r["survived"]
        score = f"{100 * r['killed'] / tried:5.1f}%" if tried else "   n/a"
        print(
            f"{module:<{width}} {r['mutants']:>7} {r['killed']:>6} {r['survived']:>8} {r['no test']:>7} {r['other']:>5} {score:>6}"
        )
        if "--survivors" in argv:
            for name in sorted(r["names"]):
                print(f"    survived: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
