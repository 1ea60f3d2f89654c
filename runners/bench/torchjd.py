"""``morl bench aggregators --against torchjd``: our aggregators and TorchJD's, side by side.

For every method both libraries have (picked up from the registry by name, so methods added
later join the table), each (K, D) cell times the two implementations on the SAME float32
[K, D] matrix, call by call in turn (ours, theirs, ours, theirs, ...), so that load on a
shared machine hits both alike. Reported: the median ms per call of each, the median of the
ratio ours/theirs of those medians, a verdict against the 1.1x guard, and the relative
difference of the two directions (a check that the option mapping makes them compute the
same thing; PCGrad/GradVac draw different random task orders, so they differ there).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

#: the guard: no cell slower than this times TorchJD's call
GUARD = 1.1
FULL_K = (2, 10, 50, 100)
FULL_D = (10_000, 1_000_000)
QUICK_K = (2, 5)
QUICK_D = (1_000,)


@dataclass(frozen=True)
class Pair:
    """How to build TorchJD's version of a morl method so both compute the same thing."""

    theirs: Callable[[int], object]  # K -> TorchJD aggregator
    ours: dict  # morl options (kept only if the morl class has them)
    note: str


def _pairs() -> dict[str, Pair]:
    import torchjd.aggregation as tj

    return {
        "mgda": Pair(lambda k: tj.MGDA(), {}, "TorchJD: Frank-Wolfe to eps=1e-3 (<=100 its); morl: exact"),
        "cagrad": Pair(
            lambda k: tj.CAGrad(c=0.5), {"c": 0.5, "rescale": 0}, "c=0.5; TorchJD does not rescale: rescale=0"
        ),
        "pcgrad": Pair(lambda k: tj.PCGrad(), {"reduction": "sum"}, "TorchJD sums: reduction='sum'"),
        "upgrad": Pair(lambda k: tj.UPGrad(), {}, "defaults (mean preference)"),
        "dualproj": Pair(lambda k: tj.DualProj(), {}, "defaults (mean preference)"),
        "imtlg": Pair(lambda k: tj.IMTLG(), {}, "defaults"),
        "alignedmtl": Pair(lambda k: tj.AlignedMTL(), {"scale_mode": "min"}, "scale_mode='min'"),
        "config": Pair(lambda k: tj.ConFIG(), {}, "defaults"),
        "nashmtl": Pair(
            lambda k: tj.NashMTL(n_tasks=k),
            {"max_norm": 1.0, "update_weights_every": 1},
            "max_norm=1, solve every call",
        ),
        "fairgrad": Pair(
            lambda k: tj.FairGrad(alpha=1.0),
            {"alpha": 1.0, "max_norm": 0.0},
            "alpha=1, no clip; morl keeps the authors' factor K (d = K x TorchJD's)",
        ),
        "gradvac": Pair(
            lambda k: tj.GradVac(beta=0.5), {"beta": 0.5, "reduction": "sum"}, "beta=0.5; TorchJD sums: reduction='sum'"
        ),
        "crmogm": Pair(
            lambda k: tj.GramianWeightedAggregator(tj.CRMOGMWeighting(tj.MGDAWeighting(), alpha=0.9)),
            {"base": "mgda", "alpha": 0.9},
            "MGDA weights smoothed with alpha=0.9 (TorchJD: CRMOGMWeighting(MGDAWeighting()))",
        ),
        "krum": Pair(
            lambda k: tj.Krum(n_byzantine=1, n_selected=1),
            {"n_byzantine": 1, "m": 1},
            "n_byzantine=1, one selected (K >= 5)",
        ),
        "excessmtl": Pair(
            lambda k: tj.ExcessMTL(), {}, "defaults (first call: weights from the unscaled excess risks)"
        ),
        "pcd": Pair(
            lambda k: tj.PCD(), {}, "defaults (tau=0.02, beta=0.999, eps=1e-8; row 0 is the primary objective)"
        ),
    }


def _key(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def paired_methods() -> list[tuple[str, Pair, dict]]:
    """``(morl name, pair, morl options)`` for every registered method TorchJD also has."""
    from morl.aggregators import available, options_of

    pairs = _pairs()
    out = []
    for name in available():
        pair = pairs.get(_key(name))
        if pair is not None:
            valid = options_of(name)
            out.append((name, pair, {k: v for k, v in pair.ours.items() if k in valid}))
    return out


def _interleaved(ours, theirs, repeats: int, budget_ms: float, per_pair: float) -> tuple[list[float], list[float]]:
    """Per-call ms of ``ours`` and ``theirs``, alternating (both already called once, taking
    ``per_pair`` ms together); fewer pairs when a pair costs more than ``budget_ms / repeats``:
    at least 3, or 1 when a single pair exceeds the whole budget (TorchJD's ConFIG at K = 100,
    D = 1e6 takes ~30 s a call)."""
    floor = 1 if per_pair > budget_ms else min(repeats, 3)
    repeats = max(floor, min(repeats, int(budget_ms / max(per_pair, 1e-6))))
    a, b = [], []
    for _ in range(repeats):
        for fn, times in ((ours, a), (theirs, b)):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return a, b


def _cell(name, pair, options, grads, repeats, budget_ms, check_finite: str) -> dict:
    from morl.aggregators import build

    k, d = grads.shape
    row = {"method": name, "K": k, "D": d, "options": options, "note": pair.note}
    try:
        theirs = pair.theirs(k)
        t0 = time.perf_counter()
        d_theirs = theirs(grads)  # doubles as the warm-up
        per_pair = time.perf_counter() - t0
    except Exception as err:  # noqa: BLE001 - TorchJD refuses some sizes (Krum: K < 4)
        return row | {"error": f"TorchJD: {type(err).__name__}: {str(err).splitlines()[0][:80]}"}
    options = options | {"check_finite": check_finite}
    row["options"] = options
    try:
        ours = build(name, **options)
        t0 = time.perf_counter()
        d_ours = ours(grads)
        per_pair = (per_pair + time.perf_counter() - t0) * 1e3
    except ValueError as err:  # a size the method refuses (Krum: K < 2f + 3)
        return row | {"error": f"morl: {str(err).splitlines()[0][:80]}"}
    row["rel_diff"] = float((d_ours - d_theirs).norm() / d_theirs.norm().clamp_min(1e-30))
    a, b = _interleaved(lambda: ours(grads), lambda: theirs(grads), repeats, budget_ms, per_pair)
    ratio = statistics.median(a) / statistics.median(b)
    verdict = "ok" if ratio <= GUARD else "OVER"
    return row | {
        "ms": statistics.median(a),
        "torchjd_ms": statistics.median(b),
        "ratio": ratio,
        "verdict": verdict,
        "pairs": len(a),
    }


def conflicting_matrix(k: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """[K, D] float32 rows g_k = s·u + n_k (u, n_k standard normal) with s = 0.7·D^(-1/4): the
    shared part s²D is 0.5 standard deviations of the noise in g_i·g_j (√D), so about a third
    of the pairs conflict (g_i·g_j < 0) at every D. With a larger shared part (``morl bench
    aggregators`` uses 0.5) no pair conflicts at D ≥ 1e4, and PCGrad, MGDA and CAGrad would
    be timed on their easiest case."""
    shared = torch.randn(1, d, generator=generator)
    return 0.7 * d**-0.25 * shared + torch.randn(k, d, generator=generator)


def time_against_torchjd(
    ks, ds, repeats: int, budget_ms: float = 6000.0, methods=None, check_finite: str = "raise"
) -> list[dict]:
    """Every paired method at every (K, D), float32, on the CPU. ``check_finite`` is ours
    (TorchJD checks nothing): "raise", the default, costs two host reads per call."""
    gen = torch.Generator().manual_seed(0)
    chosen = [m for m in paired_methods() if methods is None or m[0] in methods]
    rows = []
    for d in ds:
        for k in ks:
            grads = conflicting_matrix(k, d, gen)
            passes = floor_passes(grads)
            print(
                f"-- K={k} D={d:.0e}: J @ J.T {passes['gemm_ms']:.3f} ms, w @ J {passes['wj_ms']:.3f} ms "
                "(the two passes over [K, D] of every Gramian method, in both libraries)",
                flush=True,
            )
            for name, pair, options in chosen:
                rows.append(_with_floor(_cell(name, pair, options, grads, repeats, budget_ms, check_finite) | passes))
                print(_format_row(rows[-1]), flush=True)
    return rows


def floor_passes(grads: torch.Tensor, budget_s: float = 0.2) -> dict:
    """Median ms of MKL's plain ``J @ J.T`` and of ``w @ J`` on this matrix (after one warm-up;
    5 to 400 calls, as many as fit in ``budget_s``: a 0.07 ms product read over 5 calls moved
    by 2x): every Gramian method of either library makes these two passes, so where they are
    most of TorchJD's call (large D and K) a ratio near 1.0 is the floor, not a slow K×K step."""
    w = torch.full((grads.shape[0],), 1.0 / grads.shape[0])
    out = {}
    for key, fn in (("gemm_ms", lambda: grads @ grads.T), ("wj_ms", lambda: w @ grads)):
        fn()
        t0 = time.perf_counter()
        fn()
        calls = int(min(400, max(5, budget_s / max(time.perf_counter() - t0, 1e-7))))
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        out[key] = statistics.median(times)
    return out


def _with_floor(row: dict) -> dict:
    """``floor``: (J @ J.T + w @ J) / TorchJD's median, the ratio of a library that made the two passes
    over [K, D] and nothing else (near 1, both calls are bound by those passes)."""
    if "torchjd_ms" not in row:
        return row
    return row | {"floor": (row["gemm_ms"] + row["wj_ms"]) / row["torchjd_ms"]}


HEADER = f"{'method':<12} {'K':>4} {'D':>5} {'morl ms':>10} {'TorchJD ms':>11} {'ratio':>7} {'floor':>6}  {'verdict':<7} {'rel diff':>9}  mapping"


def _format_row(r: dict) -> str:
    from morl.runners.bench.aggregators import _si

    head = f"{r['method']:<12} {r['K']:>4} {_si(r['D']):>5}"
    if "error" in r:
        return f"{head} {'n/a':>10} {'n/a':>11} {'':>7} {'':>6}  {'n/a':<7} {'':>9}  {r['error']}"
    return (
        f"{head} {r['ms']:>10.3f} {r['torchjd_ms']:>11.3f} {r['ratio']:>7.2f} {r.get('floor', float('nan')):>6.2f}  {r['verdict']:<7} "
        f"{r['rel_diff']:>9.1e}  {r['note']}"
    )


def summary(rows: list[dict]) -> str:
    timed = [r for r in rows if "ratio" in r]
    over = [r for r in timed if r["ratio"] > GUARD]
    worst = max(timed, key=lambda r: r["ratio"], default=None)
    text = f"{len(timed)} cells timed, {len(over)} above {GUARD}x"
    if worst is not None:
        text += f"; worst {worst['method']} K={worst['K']} D={worst['D']}: {worst['ratio']:.2f}x"
    return text


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return ""


def _selection(args, quick: bool) -> tuple[list[str] | None, tuple[int, ...], tuple[int, ...]]:
    """``--methods a,b`` (morl names of paired methods), ``--ks 2,10`` and ``--ds 344008``, checked."""
    from morl.runners.errors import UserError

    methods = getattr(args, "methods", None)
    if methods is not None:
        methods = [m.strip() for m in methods.split(",") if m.strip()]
        paired = [name for name, _, _ in paired_methods()]
        unknown = [m for m in methods if m not in paired]
        if unknown or not methods:
            raise UserError(f"--methods: {', '.join(unknown) or 'empty'} not valid; allowed: {', '.join(paired)}")
    ks = parse_sizes(args, "ks", QUICK_K if quick else FULL_K)
    ds = parse_sizes(args, "ds", QUICK_D if quick else FULL_D)
    return methods, ks, ds


def parse_sizes(args, option: str, default: tuple[int, ...]) -> tuple[int, ...]:
    """``--ks`` / ``--ds``: comma-separated positive integers (``1e6`` allowed), else ``default``."""
    from morl.runners.errors import UserError

    text = getattr(args, option, None)
    if text is None:
        return default
    try:
        values = tuple(_integer(v) for v in text.split(","))
    except ValueError:
        raise UserError(f"--{option} must be comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise UserError(f"--{option} values must be >= 1, got {text!r}")
    return values


def _integer(text: str) -> int:
    """'344008' or '1e6' as an int; ValueError for anything that is not a whole number."""
    value = float(text) if any(c in text.lower() for c in ".e") else int(text)
    if value != int(value):
        raise ValueError(text)
    return int(value)


def run(args, machine: dict) -> int:
    import importlib.metadata
    import os

    quick = bool(getattr(args, "quick", False))
    machine = machine | {
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "torchjd": importlib.metadata.version("torchjd"),
    }
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    print(
        f"ours vs TorchJD {machine['torchjd']}, float32, CPU ({machine['cpu_model'] or 'unknown'}, {machine['cpus']} cores), "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); load average at start {' '.join(f'{x:.2f}' for x in load)}"
    )
    print("medians of interleaved calls (ours, theirs, ours, ...); ratio = morl median / TorchJD median")
    check_finite = getattr(args, "check_finite", None) or "raise"
    methods, ks, ds = _selection(args, quick)
    print(f"morl check_finite={check_finite!r} (TorchJD checks nothing)")
    print(HEADER, flush=True)
    rows = time_against_torchjd(ks, ds, repeats=2 if quick else 30, methods=methods, check_finite=check_finite)
    print(summary(rows))
    if hasattr(os, "getloadavg"):
        print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    out = getattr(args, "out", None)
    if out:
        import json

        from morl.runners.checkpoint import atomic_write_text

        atomic_write_text(
            out, json.dumps({"machine": machine, "quick": quick, "against": "torchjd", "rows": rows}, indent=2) + "\n"
        )
        print(f"wrote {out}")
    return 0
