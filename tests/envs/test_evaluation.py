"""Evaluation of a policy on a vector env (morl/envs/evaluation.py), on the scripted env whose
episodes and rewards are known by hand (tests/scripted_env.py): sub-env i's reward at step s is
10 i + s and an episode succeeds when it terminates. The multi-objective ``evaluate_preferences``
is checked on MO-HalfCheetah in test_mo_gymnasium_env.py."""

import numpy as np
import pytest

from morl.envs.evaluation import default_eval_episodes, evaluate_policy
from tests.scripted_env import ScriptedEnv


def _zeros(obs):
    return np.zeros((len(obs), 1), np.float32)


def test_success_return_and_episode_counts_by_hand():
    """Sub-env 0 terminates at step 3 (return 1 + 2 + 3), sub-env 1 is truncated at 5 (10·5 + 15,
    no success), sub-env 2 terminates at 5 (20·5 + 15); the extra episodes sub-env 0 finishes while
    the others complete their two are not counted."""
    env = ScriptedEnv(terminate_at=(3, None, 5), max_episode_steps=5)
    env.reset(seed=0)
    out = evaluate_policy(env, _zeros, episodes_per_task=2)
    np.testing.assert_array_equal(out["success"], [1.0, 0.0, 1.0])
    np.testing.assert_allclose(out["return"], [6.0, 65.0, 115.0])
    assert out["episodes"].tolist() == [2, 2, 2] and out["task_names"] == ["task-0", "task-1", "task-2"]
    assert env.episodes_completed.tolist() == [3, 2, 2]  # sub-env 0's third episode ran, uncounted


def test_a_policy_that_never_ends_an_episode_is_one_error():
    env = ScriptedEnv(terminate_at=(None,), max_episode_steps=50)
    env.reset(seed=0)
    with pytest.raises(RuntimeError, match=r"did not finish 1 episode\(s\) per sub-env within 10 steps"):
        evaluate_policy(env, _zeros, episodes_per_task=1, max_steps=10)
    with pytest.raises(ValueError, match="episodes_per_task must be >= 1"):
        evaluate_policy(env, _zeros, episodes_per_task=0)


def test_each_protocol_has_its_evaluation_episodes():
    assert (default_eval_episodes("mtrl"), default_eval_episodes("metaworld_v3")) == (1, 50)
    with pytest.raises(ValueError, match="unknown protocol 'v2'; valid protocols: mtrl, metaworld_v3"):
        default_eval_episodes("v2")
