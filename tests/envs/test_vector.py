"""The vector-env contract every env in envs/ inherits (morl/envs/vector.py), on the scripted env
of tests/scripted_env.py whose observation names its episode and step: SAME-STEP autoreset with
the real final observation in ``info["final_obs"]``, termination never reported as truncation,
per-episode statistics, the task one-hot, checkpoints, and one line per misuse."""

import numpy as np
import pytest

from tests.scripted_env import EPISODE, STEP, ScriptedEnv


def _run(env, steps):
    out = [env.step(np.zeros((env.num_envs, 1), np.float32)) for _ in range(steps)]
    return [np.stack(x) for x in zip(*[o[:4] for o in out])], [o[4] for o in out]


def test_termination_truncation_and_same_step_autoreset():
    """Sub-env 0 terminates at step 3, sub-env 1 never (truncated at 5), sub-env 2 at step 5
    (terminated, not truncated, although the time limit falls on the same step)."""
    env = ScriptedEnv(terminate_at=(3, None, 5), max_episode_steps=5)
    env.reset(seed=0)
    (obs, _, terminated, truncated), infos = _run(env, 5)
    assert terminated[:, 0].tolist() == [False, False, True, False, False]
    assert not truncated[:, 0].any() and not truncated[:, 2].any()
    assert truncated[:, 1].tolist() == [False] * 4 + [True] and not terminated[:, 1].any()
    assert terminated[:, 2].tolist() == [False] * 4 + [True]
    # the step that ended sub-env 0's episode: final_obs is step 3 of episode 1, obs step 0 of episode 2
    assert infos[2]["final_obs"][0, [STEP, EPISODE]].tolist() == [3, 1]
    assert obs[2, 0, [STEP, EPISODE]].tolist() == [0, 2]
    assert env.episodes_completed.tolist() == [1, 1, 1]


def test_episode_statistics_sum_over_the_episode_and_restart():
    """Sub-env i's reward at step s is 10 i + s: an episode of 3 steps returns 30 i + 6."""
    env = ScriptedEnv(terminate_at=(3, 3, 3), max_episode_steps=10)
    env.reset(seed=0)
    _, infos = _run(env, 4)
    np.testing.assert_allclose(infos[2]["episode_return"], [6.0, 36.0, 66.0])
    assert infos[2]["episode_length"].tolist() == [3, 3, 3]
    assert infos[2]["episode_success"].tolist() == [1.0, 1.0, 1.0]  # the script succeeds as it terminates
    np.testing.assert_allclose(infos[3]["episode_return"], [1.0, 11.0, 21.0])  # the next episode's first step


def test_observations_end_with_the_task_one_hot():
    env = ScriptedEnv()
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs[:, 3:], np.eye(3, dtype=np.float32))
    assert obs.shape == env.observation_space.shape and obs.dtype == np.float32


def test_a_restored_state_continues_the_episodes_in_progress():
    env, other = ScriptedEnv(), ScriptedEnv()
    env.reset(seed=0)
    _run(env, 2)
    other.load_state_dict(env.state_dict())
    np.testing.assert_array_equal(other.observations(), env.observations())
    (a, *_), _ = _run(env, 4)
    (b, *_), _ = _run(other, 4)
    np.testing.assert_array_equal(a, b)


def test_misuse_is_one_line():
    env = ScriptedEnv()
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step(np.zeros((3, 1)))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions must have shape \(3, 1\)"):
        env.step(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="actions contain NaN or inf"):
        env.step(np.full((3, 1), np.nan))
    with pytest.raises(ValueError, match="environment state is for 2 sub-envs"):
        env.load_state_dict({**ScriptedEnv(terminate_at=(3, None)).state_dict()})
    with pytest.raises(ValueError, match="max_episode_steps must be >= 1"):
        ScriptedEnv(max_episode_steps=0)
