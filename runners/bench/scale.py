"""``morl bench scale``: time and peak memory of one multi-task training step as the model grows.

Models: a ReLU MLP trunk and a VGG-style CNN trunk of about 36M parameters each (``--quick``:
about 0.1M), K linear regression heads. Each step is the forward, the backward and ``.grad``
written (no optimizer), with MGDA: ``plain`` (one backward of Σ_k L_k, the reference), ``rows``
(morl's ``[K, D]`` path), ``features`` (MGDA-UB representation gradients), ``gramian``
(``gramian=GramianTape``), ``gramian:c`` (``GramianTape(trunk, rows=c)``: c objectives per
batched backward), and TorchJD's ``autojac`` (``mtl_backward`` + ``jac_to_grad``) and
``autogram`` (``Engine.compute_gramian``) if installed. Heads get the gradient of Σ_k L_k in
morl's paths.

Each cell runs in a fresh process (``MALLOC_MMAP_THRESHOLD_`` fixed, so freed blocks go back to
the OS): after a warm-up step and with ``.grad`` unset, the peak is the process's resident-set
high-water mark (``VmHWM``, reset through ``/proc/self/clear_refs``) during the step minus the
resident set before it, i.e. what the step adds to a model and batch already in memory; the
time is the median step. Cells whose ``[K, D]`` matrix alone would pass ``--max-gb`` are skipped.
``--quick`` runs every cell in this process (a smoke run: its memory figures are rough).
``--ks 10,40`` and ``--methods plain,gramian:2`` choose the cells; ``--growth`` measures
:mod:`morl.runners.bench.growth` instead.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time

ROWS = 2  # the chunked tape's objectives per batched backward (docs/benchmarks.md, "Scale")
METHODS = ("plain", "rows", "features", "gramian", f"gramian:{ROWS}", "autojac", "autogram")
FULL = {"ks": (2, 10, 40), "models": ("mlp", "cnn"), "repeats": 1}
QUICK = {"ks": (3,), "models": ("mlp", "cnn"), "repeats": 1}


def build(model: str, quick: bool, k: int):
    """(trunk, heads, batch x, targets y [B, K]); seeded."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if model == "mlp":
        width, depth, inp, batch = (128, 4, 64, 32) if quick else (2048, 8, 1024, 256)
        layers = [nn.Linear(inp, width), nn.ReLU()]
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        trunk, x = nn.Sequential(*layers), torch.randn(batch, inp)
    else:
        c, width, batch = (8, 128, 8) if quick else (128, 2048, 32)
        convs = [nn.Conv2d(3, c, 3, padding=1), nn.ReLU()]
        for i in range(3):  # 32 -> 4 pixels, channels c -> 4c
            cin, cout = c * min(2**i, 4), c * min(2 ** (i + 1), 4)
            convs += [nn.Conv2d(cin, cout, 3, stride=2, padding=1), nn.ReLU()]
        fc = [nn.Flatten(), nn.Linear(4 * c * 16, width), nn.ReLU()]
        for _ in range(1 if quick else 4):
            fc += [nn.Linear(width, width), nn.ReLU()]
        trunk, x = nn.Sequential(*convs, *fc), torch.randn(batch, 3, 32, 32)
    heads = nn.ModuleList(nn.Linear(width, 1) for _ in range(k))
    return trunk, heads, x, torch.randn(x.shape[0], k)


def _losses(trunk, heads, x, y, views: bool = False):
    """(losses [K], z); ``views``: head k reads its own view of z, returned in place of z."""
    import torch

    import morl

    z = trunk(x)
    zs = morl.task_features(z, len(heads)) if views else [z] * len(heads)
    losses = torch.stack([((h(zs[i])[:, 0] - y[:, i]) ** 2).mean() for i, h in enumerate(heads)])
    return losses, (zs if views else z)


def _step_fn(method: str, trunk, heads, x, y):
    """The step for ``method``: a closure doing forward + backward + .grad."""
    import morl
    from morl.aggregators import build as build_agg
    from morl.gramian_tape import GramianTape

    shared, own = list(trunk.parameters()), list(heads.parameters())
    agg = build_agg("mgda")
    if method == "plain":
        return lambda: _losses(trunk, heads, x, y)[0].sum().backward()
    if method in ("rows", "features"):

        def step():
            losses, zs = _losses(trunk, heads, x, y, views=method == "features")
            feats = zs if method == "features" else None
            morl.backward(losses, shared, agg, features=feats, task_params=own)

        return step
    if method.split(":")[0] == "gramian":
        tape = GramianTape(trunk, rows=int(method.split(":")[1]) if ":" in method else None)

        def step():
            with tape:
                losses, _ = _losses(trunk, heads, x, y)
            morl.backward(losses, shared, agg, gramian=tape, task_params=own)

        return step
    return _torchjd_step(method, trunk, heads, x, y, shared)


def _torchjd_step(method, trunk, heads, x, y, shared):
    import torchjd.aggregation as tj
    from torchjd import autojac

    if method == "autojac":

        def step():
            z = trunk(x)
            losses = [((h(z)[:, 0] - y[:, i]) ** 2).mean() for i, h in enumerate(heads)]
            tasks = [list(h.parameters()) for h in heads]
            autojac.mtl_backward(losses, features=z, tasks_params=tasks, shared_params=shared)
            autojac.jac_to_grad(shared, tj.MGDA())

        return step
    from torchjd.autogram import Engine

    engine, weighting = Engine(trunk, batch_dim=None), tj.MGDAWeighting()

    def step():
        losses, _ = _losses(trunk, heads, x, y)
        losses.backward(weighting(engine.compute_gramian(losses)))

    return step


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure_cell(model: str, method: str, k: int, quick: bool, repeats: int) -> dict:
    """Time and peak-memory delta of one step, in THIS process (call it in a fresh one)."""
    import gc

    import torch

    trunk, heads, x, y = build(model, quick, k)
    step = _step_fn(method, trunk, heads, x, y)
    params = [*trunk.parameters(), *heads.parameters()]
    times, peaks = [], []
    for i in range(repeats + 1):
        for p in params:
            p.grad = None
        gc.collect()
        before = _status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        start = time.perf_counter()
        step()
        elapsed = time.perf_counter() - start
        if i:  # the first call is a warm-up
            times.append(elapsed)
            peaks.append(max(0, _status("VmHWM") - before))
    d = sum(p.numel() for p in trunk.parameters())
    return {
        "seconds": statistics.median(times),
        "peak_bytes": max(peaks),
        "shared_params": d,
        "threads": torch.get_num_threads(),
    }


def _in_child(model: str, method: str, k: int, quick: bool, repeats: int) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    spec = json.dumps({"model": model, "method": method, "k": k, "quick": quick, "repeats": repeats})
    out = subprocess.run(
        [sys.executable, "-m", "morl.runners.bench.scale", spec], env=env, capture_output=True, text=True
    )
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _has_torchjd() -> bool:
    import importlib.util

    return importlib.util.find_spec("torchjd") is not None


def _in_process(model: str, method: str, k: int, quick: bool, repeats: int) -> dict:
    try:
        return measure_cell(model, method, k, quick, repeats)
    except Exception as error:  # noqa: BLE001 -- a failing cell is reported in its row
        return {"error": f"{type(error).__name__}: {error}"}


def measure(
    quick: bool, ks=None, models=None, max_gb: float = 6.0, methods=METHODS, report=None, fresh=None
) -> list[dict]:
    """Every (model, K, method) cell; ``report(row)`` is called as each one finishes. ``fresh``
    (default: not ``quick``) runs each cell in a fresh process; otherwise all in this one, which
    is fast but makes the memory figures rough (freed memory may stay with the process)."""
    sizes = QUICK if quick else FULL
    cell = _in_child if (not quick if fresh is None else fresh) else _in_process
    rows = []
    for model in models or sizes["models"]:
        d = sum(p.numel() for p in build(model, quick, 1)[0].parameters())
        for k in ks or sizes["ks"]:
            plain = None
            for method in methods:
                row = {"model": model, "k": k, "method": method}
                if method in ("autojac", "autogram") and not _has_torchjd():
                    row["error"] = "torchjd not installed"
                elif method in ("rows", "autojac") and 2 * k * d * 4 > max_gb * 1e9:
                    row["error"] = f"skipped: [K, D] matrix twice over {max_gb:g} GB"
                else:
                    row.update(cell(model, method, k, quick, sizes["repeats"]))
                if method == "plain" and "error" not in row:
                    plain = row
                if plain is not None and "error" not in row:
                    row["time_ratio"] = row["seconds"] / plain["seconds"]
                    row["memory_ratio"] = row["peak_bytes"] / plain["peak_bytes"] if plain["peak_bytes"] else None
                rows.append(row)
                if report is not None:
                    report(row)
    return rows


def format_table(rows: list[dict]) -> str:
    lines = [
        "| model | D (shared) | K | method | time s | × plain | peak MB | × plain |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    d = {r["model"]: r["shared_params"] for r in rows if "shared_params" in r}
    for r in rows:
        head = f"| {r['model']} | {d.get(r['model'], 0) / 1e6:.1f}M | {r['k']} | {r['method']} |"
        if "error" in r:
            lines.append(f"{head} {r['error']} | | | |")
        else:
            memory = r.get("memory_ratio", 1.0)
            lines.append(
                f"{head} {r['seconds']:.3f} | {r.get('time_ratio', 1.0):.2f} | "
                f"{r['peak_bytes'] / 2**20:.0f} | {'–' if memory is None else f'{memory:.2f}'} |"
            )
    return "\n".join(lines)


def _cells(args) -> dict:
    """``--ks 10,40`` and ``--methods plain,gramian:2`` as ``measure`` arguments, checked."""
    from morl.runners.bench.torchjd import parse_sizes
    from morl.runners.errors import UserError

    cells = {}
    if getattr(args, "ks", None) is not None:
        cells["ks"] = parse_sizes(args, "ks", ())
        if min(cells["ks"]) < 2:
            raise UserError(f"--ks values must be >= 2 (objectives per step), got {args.ks!r}")
    if getattr(args, "methods", None) is not None:
        cells["methods"] = tuple(m.strip() for m in args.methods.split(","))
        if not all(m in METHODS or re.fullmatch(r"gramian:[1-9][0-9]*", m) for m in cells["methods"]):
            raise UserError(f"--methods {args.methods!r}: allowed {', '.join(METHODS)} (gramian:c for any c >= 1)")
    return cells


def run(args) -> int:
    measure_rows, table = measure, format_table
    if getattr(args, "growth", False):
        from morl.runners.bench import growth

        measure_rows, table = growth.measure, growth.format_table
    cells = {} if getattr(args, "growth", False) else _cells(args)
    rows = measure_rows(args.quick, report=lambda row: print(json.dumps(row), flush=True), **cells)
    print(table(rows))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":  # one cell, in a fresh process
    spec = json.loads(sys.argv[1])
    print(json.dumps(measure_cell(spec["model"], spec["method"], spec["k"], spec["quick"], spec["repeats"])))
