"""Train MORL-Baselines' CAPQL or its linear-scalarisation SAC and score their fronts as morl does.

Runs in the MORL-Baselines environment (``make morl-baselines``: .venv-mob, requirements/
morl_baselines.txt, morl installed there without dependencies), for the side by side with MORL-Baselines (docs/results/mo.md):

    .venv-mob/bin/python tools/morl_baselines_run.py --algo capql --env mo-hopper-v5 --seed 0 \\
        --out runs/morl_baselines/capql-mo-hopper-v5-s0
    .venv/bin/morl report runs/morl_baselines/* runs/sweeps/<mo sweep> --metric eval/hv

* ``capql`` (Lu et al., ICLR 2023): one preference-conditioned SAC, MORL-Baselines' defaults; its
  front is its deterministic policy at ``--front-weights`` preferences (MORL-Baselines evaluates 100).
* ``linear_sac``: MORL-Baselines' ``MOSAC`` (SAC on ``ω·r``, its defaults), one agent per preference
  of morl's MO-SAC population (``default_preferences``), trained one after the other with an equal
  share of the step budget; its front is each agent's deterministic policy at its own preference.

Evaluation is morl's (``runners/mo/front.py``): the same evaluation env and seeds, ``--episodes``
episodes per preference, deterministic actions (tanh of the mean), discounted (γ 0.99) and plain
vector returns, hypervolume above the task's reference point, EUM over 50 preferences, sparsity.
The run directory holds what ``morl report`` reads: ``config.yaml``, ``metrics.jsonl`` (one
``kind: eval`` line per evaluation; ``step`` counts transitions), ``final_metrics.json``; and
``train_seconds`` (CPU and wall time of training alone, evaluations excluded) in each record.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import yaml

ALGOS = ("capql", "linear_sac")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algo", choices=ALGOS, required=True)
    p.add_argument("--env", default="mo-hopper-v5")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=200_000, help="environment steps (transitions), all agents together")
    p.add_argument("--eval-every", type=int, default=50_000, help="transitions between evaluations")
    p.add_argument("--population", type=int, default=6, help="linear_sac: agents (one preference each)")
    p.add_argument("--front-weights", type=int, default=100, help="capql: preferences its front is drawn at")
    p.add_argument("--episodes", type=int, default=5, help="evaluation episodes per preference")
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args()


def preferences(args: argparse.Namespace, m: int) -> np.ndarray:
    from morl.agents.rl.mosac import default_preferences
    from morl.metrics.pareto import equally_spaced_weights

    if args.algo == "capql":
        return equally_spaced_weights(m, args.front_weights).numpy()
    return default_preferences(m, args.population).numpy()


def make_agents(args: argparse.Namespace, weights: np.ndarray) -> list:
    import mo_gymnasium

    if args.algo == "capql":
        from morl_baselines.multi_policy.capql.capql import CAPQL

        return [CAPQL(mo_gymnasium.make(args.env), log=False, seed=args.seed, device="cpu")]
    from morl_baselines.single_policy.ser.mosac_continuous_action import MOSAC

    return [
        MOSAC(mo_gymnasium.make(args.env), w.astype(np.float32), log=False, seed=args.seed + 1000 * i, device="cpu")
        for i, w in enumerate(weights)
    ]


def act(args: argparse.Namespace, agents: list, obs: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Deterministic actions for rows ``obs [N, O]`` at preferences ``w [N, M]``."""
    obs_t, w_t = torch.as_tensor(obs, dtype=torch.float32), torch.as_tensor(w, dtype=torch.float32)
    with torch.no_grad():
        if args.algo == "capql":
            return agents[0].policy.get_action(obs_t, w_t).numpy()
        owner = _owner(w, agents)  # row i acts with the agent whose preference it is
        means = torch.stack([a.actor.get_action(obs_t)[2] for a in agents])  # [P, N, A]
        return means[owner, np.arange(len(obs))].numpy()


def _owner(w: np.ndarray, agents: list) -> np.ndarray:
    prefs = np.stack([a.weights for a in agents])
    return np.abs(w[:, None, :] - prefs[None]).sum(-1).argmin(1)


def evaluate(args: argparse.Namespace, agents: list, weights: np.ndarray) -> dict:
    import morl.envs as envs
    from morl.runners.mo.front import front_scores

    eval_env = envs.make_env(args.env, seed=args.seed, eval=True, envs_per_task=min(len(weights), 10))
    out = envs.evaluate_preferences(
        eval_env, lambda obs, w: act(args, agents, obs[:, :-1], w), weights, args.episodes, gamma=0.99
    )
    ref = eval_env.ref_point
    scores = {f"eval/{k}": v for k, v in front_scores(out["discounted_return"], ref, 50).items()}
    scores.update({f"eval/undiscounted/{k}": v for k, v in front_scores(out["return"], ref, 50).items()})
    scores["eval/discounted_points"] = out["discounted_return"].tolist()
    return scores


def train(args: argparse.Namespace, agents: list, steps: int) -> None:
    """``steps`` more transitions: CAPQL takes them all, each linear-SAC agent its share."""
    for agent in agents:
        agent.train(steps // len(agents), **({"eval_env": None, "ref_point": None} if args.algo == "capql" else {}))


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=False)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.set_num_threads(1)
    m = len(__import__("morl.envs.mo_gymnasium_env", fromlist=["MO_TASKS"]).MO_TASKS[args.env].objectives)
    weights = preferences(args, m)
    agents = make_agents(args, weights)
    config = {
        "env": {"name": args.env},
        "aggregator": {"name": f"morl-baselines {args.algo}"},
        "agent": {"library": "morl-baselines==1.3.0", "population": len(agents), "preferences": weights.tolist()},
        "front": {"episodes": args.episodes, "gamma": 0.99, "eum_weights": 50},
        "run": {"seed": args.seed, "total_steps": args.steps, "eval_every": args.eval_every},
    }
    (args.out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    cpu = wall = 0.0
    done, record = 0, {}
    while done < args.steps:
        chunk = min(args.eval_every, args.steps - done)
        c0, w0 = time.process_time(), time.perf_counter()
        train(args, agents, chunk)
        cpu, wall = cpu + time.process_time() - c0, wall + time.perf_counter() - w0
        done += chunk
        record = {"kind": "eval", "step": done, **evaluate(args, agents, weights)}
        record["train_seconds"] = {"cpu": cpu, "wall": wall}
        with open(args.out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{args.algo} {args.env} s{args.seed}: {done} steps, hv {record['eval/hv']:.4g}, "
              f"eum {record['eval/eum']:.4g}, train {cpu:.0f} CPU-s", flush=True)  # fmt: skip
    final = {k: v for k, v in record.items() if k != "kind"}
    (args.out / "final_metrics.json").write_text(json.dumps(final, indent=1))


if __name__ == "__main__":
    main()
