"""``morl bench scale --growth``: how a training step's time grows with the number of tasks or clients.

Each figure is the time of the larger setting over the smaller one, both built in this process
and called in turn (small, large, small, ...): a warm-up pair, then up to 5 pairs within a 30 s
budget (at least 1; the warm-up pair itself when its large call exceeds the budget); reported
are the median times and the median of the per-pair ratios. Goal: the size ratio + 10 %.

* ``MT-SAC update``: one update of ``agents/rl/mtsac.py`` (2×256 networks, 64 transitions per
  task, Meta-World's observation 39 + T one-hot and 4 actions) at T = 10 and 50 tasks.
* ``FL round``: one round of the in-process federated simulator (``agents/federated``;
  the synthetic config's data and logistic-regression model, m = 5 models, 12 local steps of
  batch 20) with 100 and 1,000 clients: ``fedavg``, MosT with ``combine: linear`` as in
  configs/fl_synthetic_most.yaml (``most_linear``) or Algorithm 1's Γ-weighted MGDA
  (``most_mgda``), both without FedAvg warm-up rounds, and plain ``mgda`` over the clients.
* ``supervised step``: one ``SupervisedMTL.step`` (MLP 64 → 256 → 256, K linear regression
  heads passed as ``heads=`` as the supervised runner does, MGDA) at K = 4 and 40, each task's loss over 64 rows: one ``shared`` batch of 64 rows
  with K targets, or ``per-task`` batches (``task_index``: K × 64 rows, task k on its own 64).
"""

from __future__ import annotations

import statistics
import time

FULL = {"T": (10, 50), "n": (100, 1000), "K": (4, 40), "hidden": 256, "rows": 64}
QUICK = {"T": (2, 4), "n": (10, 20), "K": (2, 4), "hidden": 16, "rows": 8}
PAIRS, BUDGET_S = 5, 30.0


def mtsac_update(num_tasks: int, aggregator: str, sizes: dict):
    """One MT-SAC update on a fixed random batch ``[T, rows, ...]``: a closure."""
    import torch

    from morl.agents.rl.mtsac import MTSAC, MTSACConfig
    from morl.aggregators import build

    t, b, h = num_tasks, sizes["rows"], sizes["hidden"]
    cfg = MTSACConfig(hidden_sizes=[h, h], batch_size=b * t)
    agent = MTSAC(39 + t, 4, t, cfg, build(aggregator), "cpu", seed=0)
    gen = torch.Generator().manual_seed(t)
    obs = torch.cat([torch.randn(t, b, 39, generator=gen), torch.eye(t).unsqueeze(1).expand(t, b, t)], dim=-1)
    batch = {
        "obs": obs,
        "next_obs": torch.cat([torch.randn(t, b, 39, generator=gen), obs[..., 39:]], dim=-1),
        "action": torch.rand(t, b, 4, generator=gen) * 2 - 1,
        "reward": torch.randn(t, b, generator=gen),
        "terminated": torch.zeros(t, b),
    }
    steps = iter(range(10**9))
    return lambda: agent.update(batch, next(steps), diagnostics=False)


def fl_round(num_clients: int, strategy: str, sizes: dict):
    """One federated round (client work and server aggregation): a closure."""
    from morl.agents.federated.simulator import InProcessEngine
    from morl.runners.fl.build import build_federation, local_config
    from morl.runners.fl.config import FLConfig

    cfg = FLConfig()  # its defaults are configs/fl_synthetic_*.yaml's data, model and local training
    cfg.data.num_clients = num_clients
    cfg.strategy.name = "most" if strategy.startswith("most") else strategy
    cfg.strategy.most.combine = "mgda" if strategy == "most_mgda" else "linear"
    cfg.strategy.most.warmup_rounds = 0
    fed = build_federation(cfg, "cpu")
    engine = InProcessEngine(fed.model, fed.data, local_config(cfg), cfg.train.seed)
    return lambda: fed.run_round(engine)


def supervised_step(num_tasks: int, method: str, sizes: dict):
    """One ``SupervisedMTL.step``; ``method`` is ``params`` or ``features`` and the batch kind."""
    import torch

    from morl.agents.supervised.multitask import MultiHeadMLP, MultiTaskLoss, SupervisedMTL, TaskSpec
    from morl.aggregators import build

    grad_wrt, kind = method.split(", ")
    k, b, h = num_tasks, sizes["rows"], sizes["hidden"]
    torch.manual_seed(0)
    specs = [TaskSpec(f"task{i}", "regression") for i in range(k)]
    model = MultiHeadMLP(64, [h, h], specs)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    learner = SupervisedMTL(
        model, build("mgda"), opt, "trunk", loss_fn=MultiTaskLoss(specs), grad_wrt=grad_wrt, heads="heads"
    )
    n = b if kind == "shared" else k * b
    batch = (torch.randn(n, 64), torch.randn(n, k))
    index = None if kind == "shared" else torch.arange(n).reshape(k, b)
    return lambda: learner.step(batch, index)


CASES = (
    *(("MT-SAC update", "T", agg, mtsac_update) for agg in ("mean", "cagrad", "pcgrad", "upgrad")),
    *(("FL round", "n", s, fl_round) for s in ("fedavg", "most_linear", "most_mgda", "mgda")),
    *(
        ("supervised step", "K", f"{w}, {kind}", supervised_step)
        for kind in ("shared", "per-task")
        for w in ("params", "features")
    ),
)


def interleaved(small, large, pairs: int = PAIRS, budget: float = BUDGET_S) -> dict:
    """Median seconds of ``small()`` and ``large()`` called in turn, and the median per-pair ratio."""

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    warm = (timed(small), timed(large))
    times = [warm] if warm[1] > budget else []
    while len(times) < pairs and (not times or sum(map(sum, times)) < budget):
        times.append((timed(small), timed(large)))
    return {
        "small_s": statistics.median(t[0] for t in times),
        "large_s": statistics.median(t[1] for t in times),
        "ratio": statistics.median(t[1] / t[0] for t in times),
        "pairs": len(times),
    }


def measure(quick: bool, cases=CASES, report=None, pairs: int = PAIRS) -> list[dict]:
    """One row per case; ``report(row)`` as each finishes."""
    sizes = QUICK if quick else FULL
    rows = []
    for step, axis, method, make in cases:
        small, large = sizes[axis]
        row = {"step": step, "method": method, axis: [small, large], "goal": 1.1 * large / small}
        row.update(interleaved(make(small, method, sizes), make(large, method, sizes), pairs))
        row["met"] = row["ratio"] <= row["goal"]
        rows.append(row)
        if report is not None:
            report(row)
    return rows


def format_table(rows: list[dict]) -> str:
    lines = [
        "| step | method | sizes | small s | large s | × | goal | pairs |",
        "| --- | --- | --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in rows:
        axis = next(a for a in ("T", "n", "K") if a in r)
        small, large = r[axis]
        lines.append(
            f"| {r['step']} | {r['method']} | {axis} {small} → {large} | {r['small_s']:.3f} | {r['large_s']:.3f} | "
            f"{r['ratio']:.2f} | ≤ {r['goal']:.1f} {'met' if r['met'] else 'NOT met'} | {r['pairs']} |"
        )
    return "\n".join(lines)
