"""Every aggregator's branch-free route (what a GPU or ``torch.compile`` runs) against its CPU route.

On the CPU, solvers read flags for free: they stop early, finish small problems in Python
floats (``morl.aggregators._host``) and pick exact paths. Off the CPU every such read would be a
host synchronisation, so the same call runs a branch-free tensor route instead
(:func:`morl.host_reads.reads_are_free`). This project has no GPU; the branch-free route runs
here on CPU tensors with ``reads_are_free`` made False in every module that asks it. Both
routes must give the same direction, up to the accuracy the method states, wherever both say
they converged; the branch-free route may say it did not converge, rarely.

Problems: K = 3, 8, 12 and 16 (the Python paths, the exact paths, the iterative ones), rank K
and 2, row norms spread over 1 or 1e3, Pareto-stationary or not; float32 and float64. The
difference is measured in units of the largest row norm. Session 13 found CAGrad's branch-free
route (K > 10) 1e-5 to 1e-2 short of the CPU route's worst-task gain on 75 of 296 probe
problems (each flagged not converged): it ran FISTA's answer only, without the active-set
steps the CPU route ends with.
"""

from __future__ import annotations

import importlib

import pytest
import torch

import morl
from morl.aggregators import available
from jacobians import randomly_spread

#: every module that asks whether reading a value is free
ROUTE_MODULES = ("morl.aggregators._host", "morl.aggregators.cagrad", "morl.solvers.alpha_fair",
                 "morl.solvers.dual_cone", "morl.solvers.gramian", "morl.solvers.min_norm",
                 "morl.solvers.priority_qp", "morl.solvers.simplex_descent")
#: |d_cpu − d_branch_free| / max_k ‖g_k‖ where both converged. Measured over seeds 0-9 (64
#: problems each), worst over all methods and options: 2.3e-6 in float32 (CAGrad, c = 0.9),
#: 1.6e-10 in float64 (FairGrad and Nash-MTL: their Newton steps stop on tolerances); the branch-
#: free route said it did not converge on 2 of 640 float32 CAGrad solves at c = 2, none else.
TOL = {torch.float32: 1e-4, torch.float64: 1e-8}
#: unconverged branch-free solves allowed per seed and dtype
UNCONVERGED = 2


def _problems(seed: int) -> list[tuple[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for k in (3, 8, 12, 16):
        for rank in (k, 2):
            for spread in (0.0, 3.0):
                for stationary in (False, True):
                    out.append((f"k{k}_r{rank}_s{spread:g}_{'st' if stationary else 'gen'}",
                                randomly_spread(gen, k, 40, rank, spread, stationary)))
    return out


#: options beyond the defaults whose solvers take other paths
OPTIONS = {"cagrad": [{"c": 0.9}, {"c": 2.0}]}


def _methods() -> list[tuple[str, dict]]:
    names = [name for name in available() if morl.build(name).needs_grads]
    return [(name, opts) for name in names for opts in [{}, *OPTIONS.get(name, [])]]


def _direction(name: str, opts: dict, grads: torch.Tensor) -> tuple[torch.Tensor, int]:
    agg = morl.build(name, **opts)
    losses = torch.ones(grads.shape[0], dtype=grads.dtype) if agg.needs_losses else None
    d = agg(grads, losses)
    return d.double(), int(agg.not_converged) if agg.not_converged is not None else 0


def route_differences(name: str, opts: dict, seeds, monkeypatch) -> dict:
    """Worst difference per dtype where both routes converged, and the branch-free route's
    unconverged count per dtype."""
    modules = [importlib.import_module(m) for m in ROUTE_MODULES]
    worst = {dt: 0.0 for dt in TOL}
    unconverged = {dt: 0 for dt in TOL}
    for seed in seeds:
        for label, j in _problems(seed):
            for dtype in TOL:
                grads = j.to(dtype)
                cpu, nc_cpu = _direction(name, opts, grads)
                with monkeypatch.context() as patch:
                    for module in modules:
                        patch.setattr(module, "reads_are_free", lambda t: False)
                    free, nc_free = _direction(name, opts, grads)
                assert torch.isfinite(free).all(), (name, label, dtype)
                unconverged[dtype] += nc_free
                if nc_cpu or nc_free:
                    continue
                top = float(grads.double().norm(dim=1).max())
                worst[dtype] = max(worst[dtype], float((cpu - free).norm()) / top)
    return {"worst": worst, "unconverged": unconverged}


@pytest.mark.parametrize("name, opts", _methods(), ids=[f"{n}-{o}" if o else n for n, o in _methods()])
def test_the_branch_free_route_gives_the_cpu_routes_direction(name, opts, monkeypatch):
    out = route_differences(name, opts, [0], monkeypatch)
    for dtype, tol in TOL.items():
        assert out["worst"][dtype] <= tol, (name, out)
        assert out["unconverged"][dtype] <= UNCONVERGED, (name, out)


def test_every_module_that_asks_is_switched():
    """ROUTE_MODULES is every module of the package that calls reads_are_free (a module added
    later would otherwise keep its CPU route in the comparison above)."""
    from pathlib import Path

    root = Path(morl.__file__).resolve().parent
    asking = {".".join(("morl", *p.relative_to(root).with_suffix("").parts))
              for p in root.rglob("*.py") if "reads_are_free(" in p.read_text() and p.name != "host_reads.py"}
    assert asking == set(ROUTE_MODULES)
