"""``morl bench most``: what the transport and the aggregation add to a MosT round.

For synthetic FL rounds (n clients, m = 5 logistic-regression models), this times:

* the clients' own gradient work (all n × m local updates, vmapped);
* the OT solve (IPOT, τ = 0 and τ > 0);
* the Γ-weighted min-norm aggregation.

It reports the fastest of the repeats in milliseconds, and the overhead of transport + aggregation as
a percentage of the client work.
"""

from __future__ import annotations

import json
import time


def _best_ms(fn, repeats: int, sync) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    # The minimum: the least disturbed repeat on a shared machine.
    return min(times)


def run(args) -> int:
    import torch

    from morl.agents.federated import client as C
    from morl.agents.federated.model import build as build_model
    from morl.envs.data import federated as fl_data
    from morl.most import MosT
    from morl.runners.device import resolve_device

    device = resolve_device(getattr(args, "device", "auto"))
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    sizes = [30] if args.quick else [30, 100, 300]
    repeats = 3 if args.quick else 9
    rows = []
    for n in sizes:
        data = fl_data.synthetic(0.5, 0.5, num_clients=n, samples_per_client=100, seed=0).to(device)
        model = build_model("logreg", data.dim, data.num_classes)
        thetas = model.init(5, torch.Generator().manual_seed(0)).to(device)
        noise = C.round_noise(0, 0, n, 5, 12, 20, device)
        tr = data.train
        work = lambda: C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, 0.05)  # noqa: E731
        deltas, losses = work()
        most = MosT(5, gamma_scale="code", update="code", warm_start=False)
        most_tau = MosT(5, gamma_scale="code", update="code", tau=0.1, warm_start=False)
        gamma = most.assign(losses)
        row = {
            "n": n,
            "m": 5,
            "P": model.num_params,
            "device": str(device),
            "client_ms": _best_ms(work, repeats, sync),
            "ot_ms": _best_ms(lambda: most.assign(losses), repeats, sync),
            "ot_tau_ms": _best_ms(lambda: most_tau.assign(losses), repeats, sync),
            "aggregate_ms": _best_ms(lambda: most.directions(deltas, gamma), repeats, sync),
        }
        row["overhead_pct"] = 100 * (row["ot_ms"] + row["aggregate_ms"]) / row["client_ms"]
        rows.append(row)
        print(
            f"n={n:4d} m=5 P={row['P']}  clients {row['client_ms']:8.1f} ms  OT {row['ot_ms']:7.1f} ms  "
            f"OT(τ=0.1) {row['ot_tau_ms']:7.1f} ms  aggregate {row['aggregate_ms']:7.1f} ms  "
            f"overhead {row['overhead_pct']:5.1f} %"
        )
    if getattr(args, "out", None):
        from morl.runners.checkpoint import atomic_write_text

        atomic_write_text(args.out, json.dumps(rows, indent=2))
    return 0
