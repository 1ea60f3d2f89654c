"""Mutation testing of the numerical core, one module at a time (`make mutate [MODULE=...]`).

Each module is mutated against only the fast test files that cover it, so one mutant's run
takes seconds: with the union of all selections every min-norm mutant would also rerun the
FL and RL tests that happen to call it. mutmut (3.x) reads one config per directory, so each
module gets a scratch directory ``mutants/<module>/`` holding links to the sources (agents/,
envs/, runners/ inside its ``morl/``, as they are installed) and a pyproject.toml (this
project's, plus that module's ``[tool.mutmut]``); mutmut's own work tree is
``mutants/<module>/mutants/``, where the mutated agents/rl/mtsac.py is
``morl/agents/rl/mtsac.py`` (mutant names ``morl.agents.rl.mtsac.…``). Results persist there: a rerun only retries mutants
whose function or tests changed. Scores: ``python tools/mutation_score.py``.

Usage: python tools/mutate.py [MODULE ...] [--jobs N]   (MODULE: a key of MODULES; none = all)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "mutants"

_AGGREGATOR_TESTS = (
    "tests/test_aggregator_contract.py",  # table-driven; imports tests/jacobians.py, tests/aggregator_cases.py
    "tests/test_aggregator_weights.py",
    "tests/test_aggregator_torchjd.py",  # MGDA, PCGrad, CAGrad vs TorchJD (2.5 s)
    "tests/test_aggregator_properties.py",
    "tests/test_aggregators_reference.py",
    "tests/test_cagrad_exact.py",
    "tests/test_cagrad_edges.py",  # after the per-file CAGrad runs (e371019, c187d32)
    "tests/test_moco.py",
    "tests/test_epo_al.py",
    "tests/test_toy_moco.py",
    "tests/test_mgda_edges.py",  # after the per-file MGDA run (e371019)
    "tests/test_moco_edges.py",  # after the per-file MoCo and base runs (dcb4764)
    "tests/test_aggregator_skip_edges.py",
    "tests/test_option_errors.py",  # session 8: every option's error line, table-driven
)

# module -> (files to mutate, fast test files that cover it + pytest options). Order: the brief's, aggregators last.
MODULES: dict[str, tuple[list[str], list[str]]] = {
    "morl/gradients.py": (["morl/gradients.py"], ["tests/test_gradients.py", "tests/test_gradients_exact.py"]),
    # alpha_fair.py and dual_cone*.py are mutated with the methods that use them (groups below)
    "morl/solvers": (
        [f"morl/solvers/{name}.py" for name in ("gramian", "cpu_cache", "min_norm", "simplex", "simplex_descent")],
        ["tests/test_simplex.py", "tests/test_min_norm.py", "tests/test_min_norm_exact.py", "tests/test_min_norm_edges.py",
         "tests/test_simplex_descent.py", "tests/test_cagrad_exact.py", "tests/test_gramian.py", "tests/test_mgda_edges.py",
         # session 10: the fast tests of test_min_norm_warm.py (its quadprog comparisons of warm
         # starts take ~25 s, too long per mutant; run by hand against the survivors)
         "tests/test_min_norm_warm.py::test_each_wolfe_round_is_the_papers_step",
         "tests/test_min_norm_warm.py::test_a_batch_of_wolfe_problems_is_solved_as_each_alone",
         "tests/test_min_norm_warm.py::test_cold_solves_of_float32_rank_deficient_and_stationary_gramians"],
    ),
    "agents/federated": (
        ["agents/federated/strategies.py", "agents/federated/client.py"],
        ["tests/test_fl.py", "tests/test_fl_math.py", "tests/test_fl_official.py", "tests/test_fl_strategies_exact.py",
         "tests/test_fl_client_exact.py", "tests/test_fl_state.py",
         "tests/test_fl_most_linear.py", "tests/test_fl_defaults.py", "tests/test_fl_robust.py"],
    ),
    # test_divergence's two whole-run tests (6 s, 5 s; the second is the supervised adapter's)
    # would triple each mutant's time; its fast tests pin the non-finite guard.
    "agents/rl/mtsac.py": (
        ["agents/rl/mtsac.py"],
        ["tests/test_mtsac.py", "tests/test_mtsac_math.py", "tests/test_mtsac_edges.py", "tests/test_divergence.py",
         "tests/test_mtsac_repro.py", "tests/test_loss_weighting_learners.py", "-m", "not slow",
         "--deselect", "tests/test_divergence.py::test_huge_critic_lr_stops_with_one_line_naming_step_and_checkpoint",
         "--deselect", "tests/test_divergence.py::test_supervised_huge_lr_stops_with_one_line"],
    ),
    # The method files that existed when this was measured (docs/testing.md, "Scores"): new
    # aggregator files are being added alongside, and a glob would mutate them half-written.
    "morl/aggregators": (
        [f"morl/aggregators/{name}.py" for name in (
            "base", "_checks", "_warm_start", "mean", "mgda", "smg", "pcgrad", "cagrad", "moco", "epo_al")],
        list(_AGGREGATOR_TESTS),
    ),
    # Per-file selections of the same method files (measured at a commit; docs/testing.md): the
    # whole contract suite per mutant costs ~100 s for base.py and 1-2 min for MGDA, so each file
    # gets only the rows that name its method (`-k`, case-insensitive; mutmut passes
    # pytest_add_cli_args_test_selection to the stats run that maps tests to functions, and then
    # runs a mutant only against the mapped tests of that selection).
    "morl/aggregators/mgda.py": (  # smg.py: an MGDA subclass with nothing to mutate
        [f"morl/aggregators/{name}.py" for name in ("mgda", "smg")],
        [*_AGGREGATOR_TESTS, "-k", "mgda or smg"],
    ),
    "morl/aggregators/cagrad.py": (
        ["morl/aggregators/cagrad.py"],
        # session 12: with the float32 sweep against cvxpy's primal (3 s)
        [*_AGGREGATOR_TESTS, "tests/test_cagrad_float32.py", "-k", "cagrad"],
    ),
    "morl/aggregators/pcgrad.py": (  # session 10: the three files of the 380b9cb run that were complete there
        [f"morl/aggregators/{name}.py" for name in ("pcgrad", "mean", "epo_al")],
        [*_AGGREGATOR_TESTS, "tests/test_host_path.py", "-k", "pcgrad or mean or epo"],
    ),
    "morl/aggregators/moco.py": (
        ["morl/aggregators/moco.py"],
        [*_AGGREGATOR_TESTS, "-k", "moco"],
    ),
    # The methods added for TorchJD / LibMTL parity (session 8), per group of related files,
    # each against the rows naming its methods and its own test files.
    "morl/aggregators/imtl_g.py": (  # IMTL-G, Aligned-MTL, ConFIG: one eigh / pinv of G each
        [f"morl/aggregators/{name}.py" for name in ("imtl_g", "aligned_mtl", "config")],
        [*_AGGREGATOR_TESTS, "tests/test_projection_methods.py", "tests/test_projection_batched.py",
         "tests/test_host_path.py", "tests/test_forward_fast_path.py", "-k", "imtl or aligned or config"],
    ),
    # session 13: the Python-float path of small CPU Gramians (its K = 2 eigendecomposition),
    # against its own tests: each helper is checked there against LAPACK, exact rational
    # arithmetic or the methods' torch paths
    "morl/aggregators/_host.py": (["morl/aggregators/_host.py"], ["tests/test_host_path.py"]),
    # session 16: ExcessMTL, against its own tests and the contract rows naming it
    "morl/aggregators/excess_mtl.py": (
        ["morl/aggregators/excess_mtl.py"],
        [*_AGGREGATOR_TESTS, "tests/test_excess_mtl.py", "-k", "excess"],
    ),
    # session 17: PCD and its QP solver, against its own tests and the contract rows naming it
    "morl/aggregators/pcd.py": (
        ["morl/aggregators/pcd.py", "morl/solvers/priority_qp.py"],
        [*_AGGREGATOR_TESTS, "tests/test_pcd.py", "-k", "pcd"],
    ),
    "morl/aggregators/krum.py": (  # robust aggregation for federated learning
        [f"morl/aggregators/{name}.py" for name in ("krum", "trimmed_mean")],
        [*_AGGREGATOR_TESTS, "tests/test_robust_aggregators.py", "tests/test_host_path.py",
         "tests/test_fl_robust.py", "-k", "krum or trimmed"],
    ),
    "morl/aggregators/upgrad.py": (  # the dual-cone projections and their QP solvers
        ["morl/aggregators/upgrad.py", "morl/aggregators/dualproj.py", "morl/solvers/dual_cone.py",
         "morl/solvers/dual_cone_host.py"],
        [*_AGGREGATOR_TESTS, "tests/test_dual_cone.py", "tests/test_dual_cone_options.py",
         "tests/test_projection_methods.py", "tests/test_host_path.py", "-k", "upgrad or dualproj or dual_cone or cone"],
    ),
    "morl/aggregators/nash_mtl.py": (  # Nash-MTL and FairGrad: the α-fair solver
        ["morl/aggregators/nash_mtl.py", "morl/aggregators/fairgrad.py", "morl/solvers/alpha_fair.py"],
        [*_AGGREGATOR_TESTS, "tests/test_nash_fair.py", "tests/test_nash_fair_options.py", "-k", "nash or fair"],
    ),
    "morl/aggregators/famo.py": (  # the loss weightings (no per-task gradients) and RLW
        [f"morl/aggregators/{name}.py" for name in ("loss_weighting", "famo", "uw", "dwa", "gls", "stch", "gradnorm", "rlw")],
        [*_AGGREGATOR_TESTS, "tests/test_loss_weightings.py", "tests/test_loss_weighting_learners.py", "tests/test_rlw.py",
         "-k", "famo or uw or dwa or gls or stch or gradnorm or rlw or loss_weight"],
    ),
    "morl/aggregators/gradvac.py": (  # per-pair surgery, sign dropout, and the stochastic wrappers
        [f"morl/aggregators/{name}.py" for name in ("gradvac", "graddrop", "cr_mogm", "sdmgrad", "modo", "_double_sampling", "_seeded")],
        [*_AGGREGATOR_TESTS, "tests/test_gradvac.py", "tests/test_graddrop.py", "tests/test_cr_mogm.py",
         "tests/test_sdmgrad_modo.py", "-k", "gradvac or graddrop or cr_mogm or sdmgrad or modo or seed"],
    ),
    # The shared machinery, against the rows of two cheap methods (Mean, PCGrad) and MoCo (the
    # warm-start user): every row reaches base.py, so the full suite would repeat it 600 times.
    "morl/aggregators/base.py": (
        [f"morl/aggregators/{name}.py" for name in ("base", "_warm_start", "_checks")],
        [*_AGGREGATOR_TESTS, "tests/test_convex_pair.py",  # session 18: the two-row lerp of _weighted
         "tests/test_unit_row.py",  # session 19: its unit-vector copy
         "-k", "mean or pcgrad or moco or warm or check or error or invalid or skip or convex or unit_row"],
    ),
}
LINKS = ("tests", "configs")  # copied by mutmut into its work tree
# agents/, envs/ and runners/ install as morl.agents, morl.envs, morl.runners (pyproject.toml
# package-dir; the editable install maps them with a meta-path finder to the checkout). The
# scratch ``morl/`` therefore holds them as subfolders, so that mutmut copies them to
# ``mutants/morl/agents/...``: the copy is what ``import morl.agents...`` finds first, and
# mutmut's mutant names (from the path) match the module name its trampolines compare against.
NAMESPACED = ("agents", "envs", "runners")


def scratch_path(path: str) -> str:
    """A repository path as the scratch tree holds it: agents/rl/mtsac.py -> morl/agents/rl/mtsac.py."""
    return f"morl/{path}" if path.split("/")[0] in NAMESPACED else path


def toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def mutmut_section(mutate: list[str], tests: list[str], sources: list[str]) -> str:
    return f"""
[tool.mutmut]
source_paths = {toml_list(sources)}
only_mutate = {toml_list([scratch_path(m) for m in mutate])}
also_copy = ["configs"]
# raise statements are input checks: their types and messages are pinned by the error tests,
# not by the maths, so mutating message text would only measure string matching.
do_not_mutate_patterns = ['^\\s*raise ']
pytest_add_cli_args = ["-p", "no:cacheprovider"]
pytest_add_cli_args_test_selection = {toml_list(tests)}
"""


def link(link: Path, target: Path) -> None:
    if link.is_symlink() and link.resolve() != target.resolve():
        link.unlink()  # a scratch tree made from another checkout or snapshot
    if not link.is_symlink():
        link.symlink_to(target)


def scratch_morl(scratch: Path) -> list[str]:
    """Fill ``scratch/morl/`` with links to morl/'s entries and to agents/, envs/, runners/.

    Returns mutmut's source paths: each entry on its own (mutmut's os.walk does not descend
    into linked folders, but walks a linked folder given as a source path)."""
    morl = scratch / "morl"
    if morl.is_symlink():  # the layout before the morl namespace: scratch/morl -> checkout/morl
        morl.unlink()
    morl.mkdir(exist_ok=True)
    targets = {e.name: e for e in (ROOT / "morl").iterdir() if e.name != "__pycache__"}
    targets.update({name: ROOT / name for name in NAMESPACED})
    for stale in morl.iterdir():
        if stale.is_symlink() and stale.name not in targets:
            stale.unlink()
    for name, target in targets.items():
        link(morl / name, target)
    return [f"morl/{name}" for name in sorted(targets)]


def prepare(module: str) -> Path:
    mutate, tests = MODULES[module]
    files = [t.split("::")[0] for t in tests if t.startswith("tests/")]  # the rest: pytest options
    missing = [t for t in files if not (ROOT / t).exists()]
    if missing:
        raise SystemExit(f"mutate: test files {missing} of {module} do not exist; fix MODULES in {__file__}")
    scratch = WORK / module.replace("/", "_")
    scratch.mkdir(parents=True, exist_ok=True)
    for name in LINKS:
        link(scratch / name, ROOT / name)
    sources = scratch_morl(scratch)
    (scratch / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + mutmut_section(mutate, tests, sources))
    drop_stale_test_map(scratch, files)
    return scratch


def drop_stale_test_map(scratch: Path, test_files: list[str]) -> None:
    """Delete mutmut's map of which tests reach which function when a selected test file is
    newer than it: mutmut 3.8 keeps the map and never runs tests added since against the
    mutants (session 8 found survivors that the new tests killed when run by hand)."""
    stats = scratch / "mutants" / "mutmut-stats.json"
    if stats.exists() and any((ROOT / t).stat().st_mtime > stats.stat().st_mtime for t in test_files):
        stats.unlink()


def main(argv: list[str]) -> int:
    jobs = "2"
    if "--jobs" in argv:
        i = argv.index("--jobs")
        jobs, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    # default: every module once (the per-file aggregator keys repeat parts of morl/aggregators)
    modules = [m.rstrip("/") for m in argv] or [m for m in MODULES if not m.startswith("morl/aggregators/")]
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        print(f"mutate: unknown MODULE {unknown}; choose from {', '.join(MODULES)}", file=sys.stderr)
        return 2
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MORL_FORK_SAFE_SOLVERS": "1"}  # tests/conftest.py
    mutmut = Path(sys.executable).parent / "mutmut"
    for module in modules:
        print(f"== {module}", flush=True)
        rc = subprocess.call([str(mutmut), "run", "--max-children", jobs], cwd=prepare(module), env=env)
        if rc != 0:
            print(f"mutate: mutmut failed on {module} (exit {rc})", file=sys.stderr)
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
