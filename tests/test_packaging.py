"""What a user installs: the core needs torch only; the learners, environments and command line
install under the morl namespace (never as top-level `agents`/`envs`/`runners`), one extra per
capability."""

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
FOLDERS = {"morl": "morl", "agents": "morl.agents", "envs": "morl.envs", "runners": "morl.runners"}

# A child interpreter in which every third-party package but torch is missing (ModuleNotFoundError,
# as for an uninstalled package; torch itself tolerates a missing numpy). It imports the core, then
# builds and calls every registered aggregator.
TORCH_ONLY = r"""
import importlib.abc, sys
ALLOWED = set(sys.argv[1].split(","))
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top not in sys.stdlib_module_names and top not in ALLOWED and top != "morl" and top != "_distutils_hack":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Missing())
import warnings; warnings.simplefilter("ignore")
import torch, morl, morl.aggregators as A
import morl.solvers, morl.most, morl.bilevel, morl.ordering, morl.metrics, morl.transport, morl.gradients, morl.problems
g = torch.randn(3, 7, generator=torch.Generator().manual_seed(0))
for name in A.available():
    d = A.build(name)(g, losses=torch.rand(3) + 0.5)
    assert d.shape == (7,) and bool(torch.isfinite(d).all()), name
print(len(A.available()))
"""


def _torch_and_its_requirements() -> set[str]:
    """Import names of torch's own distribution and of everything it requires, recursively."""
    import importlib.metadata as md
    import re

    by_dist: dict[str, set[str]] = {}
    for module, dists in md.packages_distributions().items():
        for dist in dists:
            by_dist.setdefault(dist.lower().replace("_", "-"), set()).add(module)
    seen, todo, names = set(), ["torch"], set()
    while todo:
        dist = todo.pop().lower().replace("_", "-")
        if dist in seen:
            continue
        seen.add(dist)
        names |= by_dist.get(dist, set())
        try:
            requires = md.requires(dist) or []
        except md.PackageNotFoundError:
            continue
        todo += [re.split(r"[ ;<>=!~\[]", r, maxsplit=1)[0] for r in requires if "extra ==" not in r]
    return names


def _package_dirs() -> dict[str, Path]:
    found = {}
    for folder, namespace in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found[".".join([namespace, *rel.parts])] = init.parent
    return found


def test_the_package_list_names_every_package_folder():
    assert sorted(PYPROJECT["tool"]["setuptools"]["packages"]) == sorted(_package_dirs())


def test_repository_folders_map_into_the_morl_namespace():
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {
        "morl.agents": "agents",
        "morl.envs": "envs",
        "morl.runners": "runners",
    }
    assert PYPROJECT["project"]["scripts"] == {"morl": "morl.runners.cli:main"}


def test_the_distribution_name_is_not_pypis_unrelated_morl():
    # "morl" on PyPI is another project's 2022 release: `pip install morl` must not be our name
    assert PYPROJECT["project"]["name"] == "morl-suite"


def test_the_core_depends_on_torch_only_and_every_capability_has_an_extra():
    assert [d.split(">")[0].split("=")[0] for d in PYPROJECT["project"]["dependencies"]] == ["torch"]
    extras = PYPROJECT["project"]["optional-dependencies"]
    capabilities = {"cli", "rl", "mo", "sb3", "supervised", "fl", "prompt", "data", "sweep", "test"}
    assert capabilities <= set(extras)
    (everything,) = extras["all"]
    assert set(everything.removeprefix("morl-suite[").removesuffix("]").split(",")) == capabilities
    assert any(d.startswith("stable-baselines3") for d in extras["sb3"]) and any(
        d.startswith("metaworld") for d in extras["rl"]
    )


@pytest.mark.integration  # a fresh interpreter
def test_the_core_imports_and_aggregates_with_nothing_but_torch():
    allowed = _torch_and_its_requirements()
    assert "torch" in allowed and "numpy" not in allowed
    out = subprocess.run(
        [sys.executable, "-c", TORCH_ONLY, ",".join(sorted(allowed))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    from morl.aggregators import available

    assert int(out.stdout.split()[-1]) == len(available())


@pytest.mark.integration  # builds a wheel
def test_the_wheel_installs_learners_envs_and_runners_under_morl(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            str(ROOT),
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("morl_suite-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.startswith("morl_suite-")}
    assert tops == {"morl"}
    for module in (
        "morl/agents/rl/mtsac.py",
        "morl/envs/metaworld_env.py",
        "morl/runners/cli.py",
        "morl/aggregators/cagrad.py",
    ):
        assert module in names


@pytest.mark.integration  # a fresh interpreter
def test_the_command_line_parser_loads_without_torch():
    # `morl --help` stays instant: the runners live in the morl namespace, whose __init__ is lazy,
    # and subcommand modules keep their heavy imports inside main().
    probe = "import sys, morl.runners.cli as c; c.build_parser(); print(sorted(m for m in ('torch', 'numpy', 'yaml') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
