"""The front of a population: scores against hand computations, and each policy's point is
what its own sub-env returned (MO-HalfCheetah's control cost −Σa², MO-Gymnasium's definition)."""

import numpy as np
import pytest
import torch

from morl.agents.rl.mosac import MOSAC, MOSACConfig
from morl.envs import make_env
from morl.metrics.pareto import equally_spaced_weights
from morl.runners.mo.front import by_objective, front_figure, front_scores, policy_points


def test_scores_of_a_small_front_by_hand():
    points = np.array([[1.0, 3.0], [2.0, 2.0], [0.0, 0.0]])  # (0, 0) is dominated by (2, 2)
    got = front_scores(points, np.array([-1.0, -1.0]), 10)
    # boxes [-1, 1]x[-1, 3] (8) and [-1, 2]x[-1, 2] (9) overlap on [-1, 1]x[-1, 2] (6)
    assert got["hv"] == pytest.approx(11.0)
    w = equally_spaced_weights(2, 10).numpy()
    assert got["eum"] == pytest.approx(np.mean([max(wi @ p for p in points[:2]) for wi in w]))
    assert got["sparsity"] == pytest.approx((1.0**2 + 1.0**2) / 1)  # gaps 1 and 1 over n − 1 = 1
    assert got["cardinality"] == 2.0


def test_each_policy_is_evaluated_in_its_own_sub_env():
    env = make_env("mo-halfcheetah-v5", seed=0, envs_per_task=2, max_episode_steps=5, eval=True)
    agent = MOSAC(17, 6, 2, MOSACConfig(population=2, hidden_sizes=[4]), "linear", {}, "cpu", 0)
    with torch.no_grad():  # policy 0 saturates every action at +1, policy 1 outputs 0
        for w in agent.actor.weights:
            w.zero_()
        bias = agent.actor.biases[-1]
        bias.zero_()
        bias[0, 0, :6] = 50.0
    points = policy_points(agent, env, torch.device("cpu"), episodes=2, gamma=0.9)
    ones = 6.0  # Σa² of six saturated actions
    assert points["return"][:, 1] == pytest.approx([-5 * ones, 0.0])
    assert points["discounted_return"][:, 1] == pytest.approx([-ones * (1 - 0.9**5) / (1 - 0.9), 0.0])
    env.close()


def test_front_figure_has_a_panel_per_pair_and_fills_the_front():
    points = np.array([[1.0, 3.0, 0.0], [2.0, 2.0, 1.0], [0.0, 0.0, 0.0]])
    fig = front_figure(points, ["a", "b", "c"], "title")
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes] == [("a", "b"), ("a", "c"), ("b", "c")]
    dominated, front = fig.axes[0].collections
    assert len(front.get_offsets()) == 2 and len(dominated.get_offsets()) == 1


def test_per_policy_values_are_logged_one_entry_per_objective():
    got = by_objective("eval/return", np.array([[1.0, 2.0], [3.0, 4.0]]), ["v", "c"])
    assert got == {"eval/return/v": {"p0": 1.0, "p1": 3.0}, "eval/return/c": {"p0": 2.0, "p1": 4.0}}
