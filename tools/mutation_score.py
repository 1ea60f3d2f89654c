"""Mutation score per module of tools/mutate.py, from mutmut's result files
(mutants/<module>/mutants/<file>.py.meta).

Usage: python tools/mutation_score.py [MODULE] [--survivors]
MODULE is a key of tools/mutate.py's MODULES or a path prefix (morl/solvers); --survivors also
lists the surviving mutants (inspect one with `mutmut show NAME` inside mutants/<module>/).
score = killed / (killed + survived + no test): a mutant no selected test reaches is not caught
either. Mutants not run (a sampled run, an unfinished one) or with another verdict are counted
apart ('not run'). The last row is the whole core's score: each module's score weighted by its
number of mutants, with a 95 % interval where modules were sampled (stratified, finite-population
corrected; 0 wide for a full run).
"""

import math
import sys

from mutate import MODULES, results

# mutmut's exit codes (mutmut/stats.py): 1 and 3 are kills, 0 a survivor.
KILLED, SURVIVED, NO_TESTS = {1, 3}, {0}, {5, 33}
TIMEOUT = {36, 24, -24, 152, 255}


def collect(prefix: str) -> dict:
    rows: dict = {}
    for module in MODULES:
        codes = results(module) if not prefix or module == prefix or module.startswith(prefix + "/") else {}
        if not codes:
            continue
        row = rows[module] = {"mutants": len(codes), "killed": 0, "survived": 0, "no test": 0, "other": 0, "names": []}
        for name, code in codes.items():
            if code in KILLED or code in TIMEOUT:  # a mutant that hangs the tests is caught too
                row["killed"] += 1
            elif code in SURVIVED:
                row["survived"] += 1
                row["names"].append(name)
            elif code in NO_TESTS:  # no selected test reaches the mutated function
                row["no test"] += 1
                row["names"].append(name)
            else:  # not run yet, or suspicious
                row["other"] += 1
    return rows


def main(argv: list[str]) -> int:
    prefix = next((a.rstrip("/") for a in argv if not a.startswith("--")), "")
    rows = collect(prefix)
    if not rows:
        print(f"no mutmut results under mutants/ for {prefix or 'any module'}: run `make mutate` first")
        return 1
    total = {k: sum(r[k] for r in rows.values()) for k in ("mutants", "killed", "survived", "no test", "other")}
    width = max(len("module"), *map(len, rows))
    print(
        f"{'module':<{width}} {'mutants':>7} {'killed':>6} {'survived':>8} {'no test':>7} {'not run':>7} {'score':>6}"
    )
    for module, r in rows.items():
        tried = r["killed"] + r["survived"] + r["no test"]
        score = f"{100 * r['killed'] / tried:5.1f}%" if tried else "   n/a"
        print(
            f"{module:<{width}} {r['mutants']:>7} {r['killed']:>6} {r['survived']:>8} {r['no test']:>7} {r['other']:>7} {score}"
        )
        if "--survivors" in argv:
            for name in sorted(r["names"]):
                print(f"    not killed: {name}")
    mean, half = stratified(list(rows.values()))
    print(
        f"{'all':<{width}} {total['mutants']:>7} {total['killed']:>6} {total['survived']:>8} {total['no test']:>7} "
        f"{total['other']:>7} {100 * mean:5.1f}% ± {100 * half:.1f}"
    )
    return 0


def stratified(rows: list[dict]) -> tuple[float, float]:
    """The share of all mutants killed, estimated from each module's tried ones (weights: the
    modules' mutant counts), and the half-width of its 95 % normal interval."""
    strata = [(r["mutants"], r["killed"], r["killed"] + r["survived"] + r["no test"]) for r in rows]
    strata = [(size, killed / n, n) for size, killed, n in strata if n]
    total = sum(size for size, _, _ in strata)
    mean = sum(size * p for size, p, _ in strata) / total
    var = sum((size / total) ** 2 * p * (1 - p) / n * (1 - n / size) for size, p, n in strata)
    return mean, 1.96 * math.sqrt(var)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
