"""``morl bench aggregators``: time per aggregator call, and the cost of per-task gradients.

Part 1: every registered aggregator (plus MoCo in front of CAGrad) on a random [K, D]
gradient matrix, median milliseconds per call. Part 2: an MT10-SAC-sized actor (3 x 400 ReLU
MLP, input 39 + 10, output 8 = mean and log-std of a 4-D action) on a 1280-sample batch split
into 10 tasks: per-task gradients + aggregation + writing ``.grad``, as a ratio to one plain
forward + backward of the mean loss, for three ways of getting the gradients.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import time

import torch

FULL_K = (2, 10, 50, 100)
FULL_D = (10_000, 1_000_000)
QUICK_K = (2, 10)
QUICK_D = (10_000,)
GRADS_ONLY = "grads-only"  # the [K, D] matrix alone, no aggregation or .grad write
STRATEGIES = {
    "batched": "(a) batched_task_grads (torch.func.vmap)",
    "jacobian": "(b) per_task_grads (is_grads_batched)",
    "loop": "(c) K backward passes (retain_graph)",
}


def run(args) -> int:
    from morl.runners.device import resolve_device

    against = getattr(args, "against", None)
    device = resolve_device("cpu" if against else getattr(args, "device", "auto"))
    quick = bool(getattr(args, "quick", False))
    out = getattr(args, "out", None)
    machine = _machine(device)
    if against == "torchjd":
        from morl.runners.bench import torchjd as bench_torchjd

        return bench_torchjd.run(args, machine)
    print(
        f"morl bench aggregators on {machine['device_name']} (torch {torch.__version__}, {torch.get_num_threads()} threads)"
    )

    aggregator_rows = time_aggregators(
        device, QUICK_K if quick else FULL_K, QUICK_D if quick else FULL_D, repeats=2 if quick else 10
    )
    print(format_aggregator_table(aggregator_rows))
    print()
    # --quick keeps the actor but shrinks the batch (1280 -> 160) so the smoke run stays short.
    mlp = time_actor_gradients(
        device, repeats=2 if quick else 20, aggregators=("epo_al",) if quick else None, batch=160 if quick else 1280
    )
    print(format_actor_table(mlp))
    if out:
        from morl.runners.checkpoint import atomic_write_text

        atomic_write_text(
            out,
            json.dumps({"machine": machine, "quick": quick, "aggregators": aggregator_rows, "actor": mlp}, indent=2)
            + "\n",
        )
        print(f"wrote {out}")
    return 0


# -- timing ---------------------------------------------------------------------------------
def _timed(fn, device: torch.device, repeats: int, warmup: int = 2, budget_ms: float = 3000.0) -> float:
    """Median milliseconds per call of ``fn``; CUDA is synchronised only around the timed calls.

    On CPU, slow cells (e.g. K=100, D=1e6) get fewer repeats, at least 3, within ``budget_ms``.
    """
    t0 = time.perf_counter()
    for _ in range(warmup):
        fn()
    if device.type == "cpu" and warmup:
        per_call = (time.perf_counter() - t0) * 1e3 / warmup
        repeats = max(min(repeats, 3), min(repeats, int(budget_ms / max(per_call, 1e-6))))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return statistics.median(s.elapsed_time(e) for s, e in events)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _timed_against(fn, base, device: torch.device, repeats: int, warmup: int = 2) -> tuple[float, float, float]:
    """Alternate ``fn`` and ``base`` call by call; medians of (fn ms, base ms, fn/base ratio).

    Interleaving keeps the ratio honest on a shared machine whose speed drifts during a run.
    """
    pairs = [
        (_timed(fn, device, 1, warmup if i == 0 else 0), _timed(base, device, 1, warmup if i == 0 else 0))
        for i in range(repeats)
    ]
    return (
        statistics.median(a for a, _ in pairs),
        statistics.median(b for _, b in pairs),
        statistics.median(a / b for a, b in pairs),
    )


def _methods() -> list[tuple[str, str, dict]]:
    from morl.aggregators import available

    return [(name, name, {}) for name in available()] + [("moco+cagrad", "moco", {"base": "cagrad"})]


def _gradient_matrix(k: int, d: int, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    # A shared component plus task-specific noise: partly conflicting rows, as in real MTL.
    shared = torch.randn(1, d, generator=generator)
    own = torch.randn(k, d, generator=generator)
    return (0.5 * shared + own).to(device)


def time_aggregators(device: torch.device, ks, ds, repeats: int) -> list[dict]:
    """Median ms per call of every method at every (K, D), float32."""
    from morl.aggregators import build

    gen = torch.Generator().manual_seed(0)
    rows = []
    for d in ds:
        for k in ks:
            grads = _gradient_matrix(k, d, device, gen)
            losses = (0.5 + torch.rand(k, generator=gen)).to(device)
            for label, name, options in _methods():
                agg = build(name, **options)
                ms = _timed(lambda: agg(grads, losses), device, repeats)
                rows.append({"method": label, "K": k, "D": d, "ms": ms})
    return rows


def format_aggregator_table(rows: list[dict]) -> str:
    cols = sorted({(r["D"], r["K"]) for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cell = {(r["method"], r["D"], r["K"]): r["ms"] for r in rows}
    heads = [f"D={_si(d)} K={k}" for d, k in cols]
    width = max(11, *(len(h) for h in heads))
    lines = [
        "Aggregator call, median ms per call (float32)",
        f"{'method':<12}" + "".join(f"{h:>{width + 2}}" for h in heads),
    ]
    for m in methods:
        lines.append(f"{m:<12}" + "".join(f"{cell[(m, d, k)]:>{width + 2}.3f}" for d, k in cols))
    return "\n".join(lines)


def _si(d: int) -> str:
    e = int(round(math.log10(d)))
    return f"1e{e}" if 10**e == d else str(d)


# -- the MT10-sized actor ---------------------------------------------------------------------
def _actor(device: torch.device) -> torch.nn.Module:
    layers, width, n_in = [], 400, 39 + 10
    for i in range(3):
        layers += [torch.nn.Linear(n_in if i == 0 else width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, 8))
    return torch.nn.Sequential(*layers).to(device)


def _sample_losses(out: torch.Tensor, eps: torch.Tensor, obs: torch.Tensor, critic: torch.Tensor, alpha: float = 0.1):
    """Per-sample SAC actor loss alpha * log pi(a|s) - Q(s, a) with a tanh-squashed Gaussian.

    ``critic`` [..., 49, 4] is a per-task stand-in critic Q(s, a) = -||a - tanh(s A)||^2.
    """
    mean, log_std = out.chunk(2, dim=-1)
    log_std = log_std.clamp(-20.0, 2.0)
    pre = mean + log_std.exp() * eps
    action = torch.tanh(pre)
    log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    log_prob = log_prob - (2.0 * (math.log(2.0) - pre - torch.nn.functional.softplus(-2.0 * pre))).sum(-1)
    q = -(action - torch.tanh(obs @ critic)).pow(2).sum(-1)
    return alpha * log_prob - q


def time_actor_gradients(device: torch.device, repeats: int, aggregators=None, k: int = 10, batch: int = 1280) -> dict:
    """Ratios of per-task-gradient strategies (+ aggregation) to one plain backward of the mean loss."""
    from torch.func import functional_call

    from morl.aggregators import build
    from morl.gradients import batched_task_grads, per_task_grads, write_grads

    gen = torch.Generator().manual_seed(1)
    actor = _actor(device)
    params = dict(actor.named_parameters())
    obs = torch.randn(k, batch // k, 49, generator=gen).to(device)
    eps = torch.randn(k, batch // k, 4, generator=gen).to(device)
    critic = (0.1 * torch.randn(k, 49, 4, generator=gen)).to(device)

    def task_losses():  # [K] losses from one forward over the whole batch
        out = actor(obs.reshape(batch, 49)).reshape(k, batch // k, 8)
        return _sample_losses(out, eps, obs, critic).mean(dim=1)

    def plain():
        actor.zero_grad(set_to_none=True)
        task_losses().mean().backward()

    def one_task(p, o, e, c):
        return _sample_losses(functional_call(actor, p, (o,)), e, o, c).mean()

    def strategy(kind: str, agg):
        """One update's gradient work; ``agg=None`` stops after the [K, D] matrix (gradients only)."""

        def step():
            actor.zero_grad(set_to_none=True)
            if kind == "batched":
                losses, grads = batched_task_grads(
                    lambda p, o, e: one_task(p, o, e, p["critic"]), params, obs, eps, per_task_params={"critic": critic}
                )
            else:
                losses = task_losses()
                grads = per_task_grads(losses, params.values(), batched=(kind == "jacobian"))
            if agg is not None:
                write_grads(params.values(), agg(grads, losses.detach()))

        return step

    names = [GRADS_ONLY] + (list(aggregators) if aggregators else [m[0] for m in _methods()])
    options = {label: (name, opts) for label, name, opts in _methods()}
    rows = []
    for kind in STRATEGIES:
        for label in names:
            name, opts = options.get(label, (label, {}))
            agg = None if label == GRADS_ONLY else build(name, **opts)
            ms, base_ms, ratio = _timed_against(strategy(kind, agg), plain, device, repeats)
            rows.append({"strategy": kind, "aggregator": label, "ms": ms, "plain_ms": base_ms, "ratio": ratio})
    n_params = sum(p.numel() for p in params.values())
    base = statistics.median(r["plain_ms"] for r in rows)
    return {"K": k, "batch": batch, "params": n_params, "plain_backward_ms": base, "rows": rows}


def format_actor_table(result: dict) -> str:
    aggs = list(dict.fromkeys(r["aggregator"] for r in result["rows"]))
    cell = {(r["strategy"], r["aggregator"]): r for r in result["rows"]}
    lines = [
        f"MT10-sized actor ({result['params']} params), batch {result['batch']} split into K={result['K']} tasks:",
        f"per-task gradients + aggregation + .grad write, ratio to one plain forward+backward of the mean loss "
        f"(median {result['plain_backward_ms']:.2f} ms; medians of interleaved per-call ratios)",
        f"{'strategy':<44}" + "".join(f"{a:>13}" for a in aggs),
    ]
    for kind, title in STRATEGIES.items():
        lines.append(f"{title:<44}" + "".join(f"{cell[(kind, a)]['ratio']:>12.2f}x" for a in aggs))
    return "\n".join(lines)


def _machine(device: torch.device) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    return {
        "device": str(device),
        "device_name": name,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
