"""Differential check of surviving mutants: does a mutant change what the code computes?

A mutant that survives the tests is either equivalent (the same results by another route) or
a gap in the tests. Reading hundreds of solver mutants one by one does not prove which; this
runs each survivor on a fixed, varied problem set and compares its results with the unmutated
code's, in one process (mutmut's trampolines read ``MUTANT_UNDER_TEST`` at every call):

    cd mutants/morl_solvers_min_norm.py/mutants   # tools/mutate.py's scratch tree of the module
    OMP_NUM_THREADS=1 ../../../.venv/bin/python ../../../tools/mutant_probe.py PROBE [NAME ...]

PROBE is one of ``solvers`` (min_norm.py, simplex.py), ``dual_cone``, ``cagrad``, ``alpha_fair``,
``priority_qp``; without names it takes every survivor that ``mutmut results`` lists for the
probe's files. Each result is compared by what the method promises, not bit for bit: min-norm
weights by the objective ½λᵀGλ they reach and their feasibility (λ is not unique for
rank-deficient G), dual-cone projections by objective and feasibility, other results entry by
entry (α-fair weights relative to their largest entry). A mutant is

* ``same``: every result within ``TOL`` (relative) of the reference; route-only or equivalent;
* ``DIFFERS``: some result off by more (the case is named): a gap the tests must close;
* ``RAISES`` / ``TIMEOUT``: an exception or more than ``TIMEOUT_S`` seconds on the probe set
  (a test on such input would kill it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable

import torch

TOL = 1e-9
#: float32 results: their own rounding (see _distance)
TOL_F32 = 1e-6
TIMEOUT_S = 60


def _jacobian(gen: torch.Generator, k: int, rank: int, spread: float, stationary: bool, d: int = 48) -> torch.Tensor:
    """tests/jacobians.py's rows of a given rank, norms over 10**spread, optionally stationary
    (the work tree holds a copy of tests/; imported late, once main has put it on the path)."""
    from jacobians import randomly_spread

    return randomly_spread(gen, k, d, rank, spread, stationary)


def _gramians() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(20261125)
    out = {}
    for k in (3, 5, 6, 7, 8, 10, 12, 16, 24, 40):
        for rank in sorted({k, max(2, k // 2), 2}):
            for spread in (0.0, 3.0, 6.0):
                for stationary in (False, True):
                    j = _jacobian(gen, k, rank, spread, stationary)
                    out[f"k{k}_r{rank}_s{spread:g}_{'st' if stationary else 'gen'}"] = j @ j.T
    return out


def _min_norm_cases() -> dict[str, tuple[torch.Tensor, dict]]:
    """(Gramian, min_norm_solve kwargs) per case: float64 and float32 Gramians, with and
    without MoCo's ridge ρ, cold and warm (uniform, one-hot and random starts), batched."""
    gen = torch.Generator().manual_seed(7)
    cases = {}
    grams = _gramians()
    for name, g in grams.items():
        k = g.shape[-1]
        cases[name + "_f64"] = (g, {})
        cases[name + "_f32"] = (g.float(), {})
        if "gen" in name and k in (5, 8, 12, 24):
            top = float(g.diagonal().max())
            cases[name + "_rho"] = (g, {"rho": 0.05 * top})
            cases[name + "_uniform"] = (g, {"init": torch.full((k,), 1.0 / k, dtype=torch.float64)})
            cases[name + "_onehot"] = (g, {"init": torch.eye(k, dtype=torch.float64)[k - 1]})
            cases[name + "_rand"] = (g, {"init": torch.rand(k, generator=gen, dtype=torch.float64)})
    for k in (3, 7, 12, 24):
        batch = torch.stack([g for n, g in grams.items() if n.startswith(f"k{k}_")][:6])
        cases[f"batch_k{k}"] = (batch, {})
        cases[f"batch_k{k}_f32"] = (batch.float(), {})
        cases[f"batch_k{k}_warm"] = (batch, {"init": torch.full((batch.shape[0], k), 1.0 / k, dtype=torch.float64)})
    return cases


def probe_solvers() -> dict[str, object]:
    """Results of morl.solvers' min-norm (cold, warm, ridged, batched, the branch-free route)
    and simplex code on the problem set."""
    import importlib

    mn = importlib.import_module("morl.solvers.min_norm")  # morl.solvers.min_norm is also a function
    from morl.solvers.simplex import fw_gap, project_simplex, softmax_map

    res: dict[str, object] = {}
    cases = _min_norm_cases()
    for name, (g, kw) in cases.items():
        lam, ok = mn.min_norm_solve(g, **kw)
        res["mn_" + name] = (
            "simplex",
            g.double() + kw.get("rho", 0.0) * torch.eye(g.shape[-1], dtype=torch.float64),
            lam,
            ok,
        )
        res["gap_" + name] = ("values", mn.min_norm_gap(g, torch.full(g.shape[:-1], 1.0 / g.shape[-1], dtype=g.dtype)))
    for name, (g, kw) in list(cases.items())[::7]:  # the branch-free (GPU) route on a subset
        with _device_route(mn):
            lam, ok = mn.min_norm_solve(g, **kw)
        res["dev_" + name] = (
            "simplex",
            g.double() + kw.get("rho", 0.0) * torch.eye(g.shape[-1], dtype=torch.float64),
            lam,
            ok,
        )
    gen = torch.Generator().manual_seed(3)
    for shape in ((1,), (2,), (5,), (9,), (4, 7), (3, 2, 16)):
        for scale in (0.1, 1.0, 30.0):
            v = scale * torch.randn(*shape, generator=gen, dtype=torch.float64)
            res[f"proj_{shape}_{scale}"] = ("values", project_simplex(v))
            res[f"proj32_{shape}_{scale}"] = ("values", project_simplex(v.float()))
            res[f"softmax_{shape}_{scale}"] = ("values", softmax_map(v))
            res[f"fw_gap_{shape}_{scale}"] = ("values", fw_gap(softmax_map(v), v.flip(-1)))
    return res


def _cone_cases() -> dict[str, tuple[torch.Tensor, torch.Tensor, dict]]:
    """(Gramian, u, project_to_dual_cone kwargs): UPGrad's K right-hand sides p_i e_i, DualProj's
    one (the mean) and random nonnegative ones, float64 and float32, batched, with the iterative
    solver forced at small K (exact_max_k=0)."""
    gen = torch.Generator().manual_seed(11)
    cases = {}
    for name, g in _gramians().items():
        k = g.shape[-1]
        if k > 24:
            continue
        upgrad = torch.eye(k, dtype=torch.float64) / k
        mean = torch.full((1, k), 1.0 / k, dtype=torch.float64)
        rand = torch.rand(3, k, generator=gen, dtype=torch.float64)
        cases[name + "_up"] = (g, upgrad, {})
        cases[name + "_up32"] = (g.float(), upgrad, {})
        cases[name + "_dp"] = (g, mean, {})
        cases[name + "_rand"] = (g, rand, {})
        if "r2_s0" in name or ("gen" in name and k in (5, 8)):
            cases[name + "_iter"] = (g, rand, {"exact_max_k": 0})
            cases[name + "_iter_up"] = (g, upgrad, {"exact_max_k": 0, "max_iter": 7})
    grams = _gramians()
    for k in (3, 5, 8, 12):
        batch = torch.stack([g for n, g in grams.items() if n.startswith(f"k{k}_")][:5])
        u = torch.eye(k, dtype=torch.float64).expand(5, k, k) / k
        cases[f"batch_k{k}"] = (batch, u, {})
        cases[f"batch_k{k}_iter"] = (batch, u, {"exact_max_k": 0})
    return cases


def probe_dual_cone() -> dict[str, object]:
    """Results of the dual-cone projection (morl.solvers.dual_cone) and of the UPGrad and
    DualProj aggregators built on it."""
    import morl
    import morl.solvers.dual_cone as dc

    res: dict[str, object] = {}
    cases = _cone_cases()
    for name, (g, u, kw) in cases.items():
        v, ok = dc.project_to_dual_cone(g, u, **kw)
        res["cone_" + name] = ("cone", g.double(), u, v, ok, g.dtype)
    for name, (g, u, kw) in list(cases.items())[::6]:  # the branch-free (GPU) route on a subset
        with _device_route(dc):
            v, ok = dc.project_to_dual_cone(g, u, **kw)
        res["dev_" + name] = ("cone", g.double(), u, v, ok, g.dtype)
    _aggregator_results(
        res,
        morl,
        (("upgrad", {}), ("upgrad", {"reg_eps": 1e-4}), ("dualproj", {}), ("dualproj", {"reg_eps": 1e-3})),
        ks=(2, 3, 6, 10, 13, 20),
    )
    return res


def probe_cagrad() -> dict[str, object]:
    """Results of CAGrad's dual solver (cold, warm, float32, the branch-free route) and of the
    CAGrad aggregator (each rescale, warm starts, two calls)."""
    import morl
    import morl.aggregators.cagrad as cg

    res: dict[str, object] = {}
    gen = torch.Generator().manual_seed(13)
    for i, (name, g) in enumerate(_gramians().items()):
        k = g.shape[-1]
        if k > 24:
            continue
        gn = g / g.diagonal().max()
        for c in (0.2, 0.5, 0.9, 2.0):
            weights, w, ok = cg.cagrad_dual_solve(gn, c)
            res[f"dual_{name}_{c}"] = ("weights", gn, weights, ok)
            if i % 3 == 0:
                weights, w, ok = cg.cagrad_dual_solve(gn.float(), c)
                res[f"dual32_{name}_{c}"] = ("weights", gn, weights, ok)
                init = torch.rand(k, generator=gen, dtype=torch.float64)
                weights, w, ok = cg.cagrad_dual_solve(gn, c, max_iter=40, init=init / init.sum())
                res[f"warm_{name}_{c}"] = ("weights", gn, weights, ok)
            if i % 5 == 0:
                with _device_route(cg):
                    weights, w, ok = cg.cagrad_dual_solve(gn, c)
                res[f"dev_{name}_{c}"] = ("weights", gn, weights, ok)
    for k in (3, 8, 12):
        batch = torch.stack([g / g.diagonal().max() for n, g in _gramians().items() if n.startswith(f"k{k}_")][:5])
        weights, w, ok = cg.cagrad_dual_solve(batch, 0.5)
        res[f"batch_{k}"] = ("weights", batch, weights, ok)
    _aggregator_results(
        res,
        morl,
        [("cagrad", opts) for opts in ({}, {"c": 0.9, "rescale": 0}, {"c": 2.0, "rescale": 2}, {"warm_start": True})],
        ks=(2, 3, 7, 10, 14),
    )
    return res


def probe_alpha_fair() -> dict[str, object]:
    """Results of the α-fair Newton solver (a = 1, ½, 2; cold, warm, batched, the branch-free
    route), weights normalised by their largest entry, and of Nash-MTL and FairGrad."""
    import morl
    import morl.solvers.alpha_fair as af

    res: dict[str, object] = {}
    grams = {n: g for n, g in _gramians().items() if g.shape[-1] <= 24}
    for i, (name, g) in enumerate(grams.items()):
        for a in (1.0, 0.5, 2.0):
            kw = {"init": torch.ones(g.shape[-1], dtype=torch.float64)} if i % 3 == 1 else {}
            with _device_route(af) if i % 5 == 0 else _device_route():
                w, ok, stationary = af.alpha_fair_solve(g, a, **kw)
            res[f"af_{name}_{a}"] = (
                "values",
                torch.cat([w / w.amax(), ok.double().view(1), stationary.double().view(1)]),
            )
    for k in (3, 8, 12):
        batch = torch.stack([g for n, g in grams.items() if n.startswith(f"k{k}_")][:5])
        w, ok, stationary = af.alpha_fair_solve(batch, 1.0)
        res[f"af_batch_{k}"] = (
            "values",
            torch.cat([w / w.amax(-1, keepdim=True), ok.double().unsqueeze(-1), stationary.double().unsqueeze(-1)], -1),
        )
    _aggregator_results(res, morl, (("nash_mtl", {}), ("fairgrad", {}), ("fairgrad", {"alpha": 2.0})))
    return res


def probe_priority_qp() -> dict[str, object]:
    """Results of PCD's dual active-set solver (feasible, infeasible and dependent constraints)
    and of the PCD aggregator."""
    import morl
    from morl.solvers.priority_qp import dual_terms, solve_masked

    res: dict[str, object] = {}
    gen = torch.Generator().manual_seed(17)
    for name, g in _gramians().items():
        k = g.shape[-1]
        gn = g / g.diagonal().max()
        for tau in (0.0, 0.02, 0.5):
            taus = tau * torch.rand(k - 1, generator=gen, dtype=torch.float64)
            mu, feasible, converged = solve_masked(*dual_terms(gn, taus), 1e-9, 3 * k + 10)
            res[f"pqp_{name}_{tau}"] = (
                "values",
                torch.cat([mu, feasible.double().view(1), converged.double().view(1)]),
            )
    _aggregator_results(res, morl, (("pcd", {}), ("pcd", {"tau": 0.3})))
    return res


def _aggregator_results(res: dict, morl, methods, ks=(2, 3, 6, 10, 13)) -> None:
    """Two calls of each (method, options) on varied Jacobians (the second may warm-start from
    the first), and one in float32, relative to the largest row norm."""
    gen = torch.Generator().manual_seed(19)
    for k in ks:
        for spread in (0.0, 4.0):
            j = _jacobian(gen, k, max(2, k // 2), spread, False, d=30)
            for method, opts in methods:
                agg = morl.build(method, **opts)
                for rep in range(2):
                    res[f"agg_{method}_{opts}_{k}_{spread}_{rep}"] = ("values", agg(j) / j.norm(dim=1).max())
                res[f"agg32_{method}_{opts}_{k}_{spread}"] = (
                    "values",
                    morl.build(method, **opts)(j.float()) / j.norm(dim=1).max(),
                )


class _device_route:
    """Make the given modules take their branch-free tensor route (what a GPU runs)."""

    def __init__(self, *modules):
        self.modules = modules

    def __enter__(self):
        self.saved = [(m, m.reads_are_free) for m in self.modules if hasattr(m, "reads_are_free")]
        for m, _ in self.saved:
            m.reads_are_free = lambda t: False
        return self

    def __exit__(self, *exc):
        for m, f in self.saved:
            m.reads_are_free = f


PROBES: dict[str, tuple[Callable[[], dict], tuple[str, ...]]] = {
    "solvers": (probe_solvers, ("morl.solvers.min_norm", "morl.solvers.simplex.")),
    "cagrad": (probe_cagrad, ("morl.aggregators.cagrad",)),
    "dual_cone": (probe_dual_cone, ("morl.solvers.dual_cone", "morl.aggregators.upgrad", "morl.aggregators.dualproj")),
    "alpha_fair": (
        probe_alpha_fair,
        ("morl.solvers.alpha_fair", "morl.aggregators.nash_mtl", "morl.aggregators.fairgrad"),
    ),
    "priority_qp": (probe_priority_qp, ("morl.solvers.priority_qp", "morl.aggregators.pcd")),
}


def _distance(kind: str, ref, got) -> float:
    """How far ``got`` is from ``ref`` in what the result promises (0 = as good)."""
    if kind == "values":
        ref, got = ref[1], got[1]
        if ref.shape != got.shape:
            return float("inf")
        if not ref.numel():
            return 0.0
        slack = 0.0 if ref.dtype == torch.float64 else TOL_F32
        scale = max(1.0, float(ref.abs().max()))
        return max(float((got.double() - ref.double()).abs().max()) / scale - slack, 0.0)
    if kind == "cone":
        return _cone_distance(ref, got)
    if kind == "weights":
        return _weights_distance(ref, got)
    _, gram, lam_ref, ok_ref = ref
    _, _, lam, ok = got
    if lam.shape != lam_ref.shape:
        return float("inf")
    # float32 weights are rounded to ~6e-8: a route that differs only in rounding moves the
    # objective and Σλ by ~1e-7 there, so those compare at float32's resolution
    slack = 0.0 if lam_ref.dtype == torch.float64 else TOL_F32
    lam, lam_ref = lam.double(), lam_ref.double()

    def obj(x):
        return 0.5 * (x.unsqueeze(-2) @ gram @ x.unsqueeze(-1)).squeeze(-1).squeeze(-1)

    def infeasible(x):
        return max(float((-x).clamp_min(0).amax()), float((x.sum(-1) - 1).abs().amax()))

    top = gram.diagonal(dim1=-2, dim2=-1).amax(-1)
    worse = float(((obj(lam) - obj(lam_ref)) / top).amax()) - slack
    excess = infeasible(lam) - max(infeasible(lam_ref), slack)
    flags = 0.0 if ok_ref is None or torch.equal(ok.bool(), ok_ref.bool()) else 1.0
    return max(worse, excess, flags, 0.0)


def _cone_distance(ref, got) -> float:
    """v = argmin_{v ≥ u} vᵀGv: compared by objective (relative to max diag · (Σ|u|)²), by
    feasibility (relative to max |u|) and by the converged flags."""
    _, gram, u, v_ref, ok_ref, dtype = ref
    v, ok = got[3], got[4]
    slack = 0.0 if dtype == torch.float64 else TOL_F32
    if v.shape != v_ref.shape:
        return float("inf")
    v, v_ref, u = v.double(), v_ref.double(), u.double()

    def obj(x):
        return (x @ gram * x).sum(-1) if gram.dim() == 2 else (x @ gram * x).sum(-1)

    top = gram.diagonal(dim1=-2, dim2=-1).amax(-1, keepdim=True) if gram.dim() == 3 else gram.diagonal().amax()
    scale = top * u.abs().sum(-1).square() + 1e-300
    worse = float(((obj(v) - obj(v_ref)) / scale).amax()) - slack
    bound = u.abs().amax()
    excess = float(((u - v).clamp_min(0).amax() - (u - v_ref).clamp_min(0).amax()) / bound) - slack
    flags = 0.0 if torch.equal(ok.bool(), ok_ref.bool()) else 1.0
    return max(worse, excess, flags, 0.0)


def _weights_distance(ref, got) -> float:
    """Combination weights a of the rows (d = aᵀJ): compared by the direction they give,
    (Δa)ᵀG(Δa) relative to max diag · (Σ|a|)² (a is not unique where G is singular), and by
    the converged flags."""
    _, gram, a_ref, ok_ref = ref
    a, ok = got[2], got[3]
    if a.shape != a_ref.shape:
        return float("inf")
    slack = 0.0 if a_ref.dtype == torch.float64 else TOL_F32
    delta = (a.double() - a_ref.double()).unsqueeze(-1)
    top = gram.diagonal(dim1=-2, dim2=-1).amax(-1)
    size = (top * a_ref.double().abs().sum(-1).square()).clamp_min(1e-300)
    off = float(((delta.mT @ gram @ delta).squeeze(-1).squeeze(-1).clamp_min(0) / size).sqrt().amax()) - slack
    flags = 0.0 if torch.equal(ok.bool(), ok_ref.bool()) else 1.0
    return max(off, flags, 0.0)


def _run(probe: Callable[[], dict], name: str) -> dict | str:
    os.environ["MUTANT_UNDER_TEST"] = name
    signal.alarm(TIMEOUT_S)
    try:
        return probe()
    except _Timeout:
        return "TIMEOUT"
    except Exception as exc:  # a mutant may raise anything
        return f"RAISES {type(exc).__name__}: {str(exc)[:80]}"
    finally:
        signal.alarm(0)
        os.environ["MUTANT_UNDER_TEST"] = ""


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout


def _survivors(prefixes: tuple[str, ...]) -> list[str]:
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "mutmut"), "results"], capture_output=True, text=True, cwd=".."
    ).stdout
    names = [line.split(":")[0].strip() for line in out.splitlines() if line.strip().endswith("survived")]
    return [n for n in names if n.startswith(prefixes)]


def main(argv: list[str]) -> None:
    sys.path.insert(0, os.getcwd())  # the scratch tree's mutated morl, not the checkout's
    sys.path.insert(1, os.path.join(os.getcwd(), "tests"))  # tests/jacobians.py
    torch.set_num_threads(1)
    probe, prefixes = PROBES[argv[0]]
    names = argv[1:] or _survivors(prefixes)
    signal.signal(signal.SIGALRM, _alarm)
    reference = _run(probe, "")
    assert isinstance(reference, dict), reference
    import morl

    assert os.path.realpath(morl.__file__).startswith(os.getcwd()), f"not the scratch tree's morl: {morl.__file__}"
    for name in names:
        got = _run(probe, name)
        if isinstance(got, str):
            print(f"{name}\t{got}", flush=True)
            continue
        dist = {key: _distance(ref[0], ref, got[key]) for key, ref in reference.items()}
        key, worst = max(dist.items(), key=lambda kv: kv[1])
        verdict = "same" if worst <= TOL else "DIFFERS"
        print(f"{name}\t{verdict}\t{worst:.3g}\t{key}\t{sum(v > TOL for v in dist.values())}/{len(dist)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
