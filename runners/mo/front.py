"""The population's front: each policy's mean vector return, scored as MORL-Baselines scores fronts.

Policy p runs its deterministic action (``tanh`` of its mean) in evaluation sub-env p for
``front.episodes`` episodes; its point is the mean undiscounted and the mean discounted
(``Σ_t γ^t r_t``, γ = ``front.gamma``) vector return. The discounted points, Pareto-filtered, are
scored: hypervolume above the env's reference point, EUM over ``equally_spaced_weights(M, n)``,
sparsity and cardinality (``morl.metrics.pareto``; docs/mo_metrics.md); the undiscounted ones
likewise under ``eval/undiscounted/``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from morl.runners.mo.session import NONFINITE_ACTIONS
from morl.runners.rl.iteration import finite_actions


def policy_points(agent, eval_env, device: torch.device, episodes: int, gamma: float) -> dict[str, np.ndarray]:
    """``{"return": [P, M], "discounted_return": [P, M]}``: policy p's point (a conditioned agent's
    at preference p)."""
    import morl.envs as envs

    def policy(obs: np.ndarray, preferences: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            raw = torch.as_tensor(obs[:, :-1], device=device)  # without the one-hot
            if agent.conditioned:
                action = agent.act(raw, torch.as_tensor(preferences), deterministic=True)
            else:  # sub-env p acts for row p: the preferences only label the rows
                action = agent.act(raw, deterministic=True)
            return finite_actions(action.cpu().numpy(), NONFINITE_ACTIONS)

    out = envs.evaluate_preferences(eval_env, policy, agent.host_preferences.numpy(), episodes, gamma)
    return {"return": out["return"], "discounted_return": out["discounted_return"]}


def front_scores(points: np.ndarray, ref_point: np.ndarray, eum_weights: int) -> dict[str, float]:
    """Hypervolume, EUM, sparsity and cardinality of the non-dominated ``points [P, M]``."""
    from morl.metrics.pareto import equally_spaced_weights, expected_utility, hypervolume, pareto_filter, sparsity

    front = pareto_filter(points)
    weights = equally_spaced_weights(points.shape[1], eum_weights)
    return {
        "hv": float(hypervolume(front, ref_point)),
        "eum": float(expected_utility(front, weights)),
        "sparsity": float(sparsity(front)),
        "cardinality": float(len(front)),
    }


def by_objective(tag: str, points: np.ndarray, objectives: list[str]) -> dict[str, dict[str, float]]:
    """``{"<tag>/<objective>": {"p0": value, ...}}``: how ``[P, M]`` values are logged (one table
    column per objective in ``morl eval``, TensorBoard tags ``<tag>/<objective>/p<i>``)."""
    return {f"{tag}/{name}": {f"p{i}": float(v) for i, v in enumerate(col)} for name, col in zip(objectives, points.T)}


def front_figure(points: np.ndarray, objectives: list[str], title: str) -> Any:
    """A scatter of the points, the non-dominated ones filled, each labelled with its policy
    (one panel per pair of objectives when M > 2)."""
    from matplotlib.figure import Figure

    from morl.metrics.pareto import pareto_mask

    keep = pareto_mask(points).numpy()
    pairs = [(i, j) for i in range(len(objectives)) for j in range(i + 1, len(objectives))]
    fig = Figure(figsize=(4.2 * len(pairs), 3.8), layout="constrained")
    for k, (i, j) in enumerate(pairs):
        ax = fig.add_subplot(1, len(pairs), k + 1)
        ax.scatter(points[~keep, i], points[~keep, j], facecolors="none", edgecolors="tab:gray", label="dominated")
        ax.scatter(points[keep, i], points[keep, j], color="tab:blue", label="front")
        for p, (x, y) in enumerate(points[:, [i, j]]):
            ax.annotate(f"p{p}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xlabel(objectives[i])
        ax.set_ylabel(objectives[j])
        ax.grid(alpha=0.3)
    fig.axes[0].legend(loc="best", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def evaluation_metrics(s, episodes: int | None = None, figure: bool = True) -> dict[str, Any]:
    """The evaluation record of a session: scores (discounted and undiscounted), per-policy points,
    ``headline`` (the hypervolume) and, with ``figure``, the front's scatter under ``figures``."""
    front = s.cfg.front
    points = policy_points(s.agent, s.eval_env, s.device, episodes or front.episodes, front.gamma)
    names, ref = s.objective_names, s.eval_env.ref_point
    scores = front_scores(points["discounted_return"], ref, front.eum_weights)
    plain = front_scores(points["return"], ref, front.eum_weights)
    out: dict[str, Any] = {f"eval/{k}": v for k, v in scores.items()}
    out.update({f"eval/undiscounted/{k}": v for k, v in plain.items()})
    out.update(by_objective("eval/discounted_return", points["discounted_return"], names))
    out.update(by_objective("eval/return", points["return"], names))
    out["headline"] = scores["hv"]
    if figure:
        title = f"{s.cfg.env.name}, step {s.step}\ndiscounted returns (γ = {front.gamma:g}), hv {scores['hv']:.4g}"
        out["figures"] = {"eval/front": front_figure(points["discounted_return"], names, title)}
    return out
