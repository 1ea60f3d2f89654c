"""tools/morl_baselines_run.py routes each evaluation row to the right MORL-Baselines policy (the
training itself runs in .venv-mob; here fake agents with MORL-Baselines' call signatures)."""

import importlib.util
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

SPEC = importlib.util.spec_from_file_location(
    "morl_baselines_run", Path(__file__).resolve().parents[2] / "tools" / "morl_baselines_run.py"
)
tool = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tool)


def linear_agent(weights, action_value):
    """MORL-Baselines' MOSAC: ``.weights`` and ``actor.get_action(obs) -> (sample, log_prob, mean)``."""

    def get_action(obs):
        mean = torch.full((obs.shape[0], 2), float(action_value))
        return torch.randn_like(mean), None, mean

    return SimpleNamespace(weights=np.asarray(weights), actor=SimpleNamespace(get_action=get_action))


def test_each_row_acts_with_the_linear_agent_of_its_preference_and_its_mean_action():
    agents = [linear_agent([1.0, 0.0], 10), linear_agent([0.5, 0.5], 20), linear_agent([0.0, 1.0], 30)]
    w = np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
    actions = tool.act(Namespace(algo="linear_sac"), agents, np.zeros((4, 3)), w)
    np.testing.assert_array_equal(actions[:, 0], [30, 10, 20, 30])  # deterministic: the mean, not the sample


def test_capql_gets_each_rows_observation_and_preference():
    def get_action(obs, w):  # CAPQL's Policy.get_action(obs, w): deterministic
        return obs[:, :1] + 100 * w[:, :1]

    agent = SimpleNamespace(policy=SimpleNamespace(get_action=get_action))
    obs, w = np.array([[1.0, 0.0], [2.0, 0.0]]), np.array([[0.25, 0.75], [1.0, 0.0]])
    actions = tool.act(Namespace(algo="capql"), [agent], obs, w)
    np.testing.assert_allclose(actions[:, 0], [26.0, 102.0])
