"""Meta-World 3 MT10 / MT1 behind the multi-task vector-env contract.

MT10 is built once per module (~6 s: Meta-World generates 50 goals per task); the protocol
checks that need many resets use MT1 (one task, ~0.5 s).
"""

import math

import metaworld
import numpy as np
import pytest
import torch
from metaworld.env_dict import MT10_V3
from metaworld.policies import ENV_POLICY_MAP

from morl.envs import default_eval_episodes, evaluate_policy, make_env

GOAL = slice(36, 39)  # goal xyz inside Meta-World's 39-d observation


@pytest.fixture(scope="module")
def mt10():
    return make_env("mt10", seed=0, protocol="mtrl")


def run(env, actions):
    out = []
    for a in actions:
        obs, rew, term, trunc, info = env.step(a)
        out.append((obs, rew, term, trunc, info["final_obs"], info["success"]))
    return out


@pytest.mark.integration  # builds MT10
def test_mt10_observations_carry_the_task_one_hot(mt10):
    assert mt10.task_names == list(MT10_V3) and mt10.num_tasks == 10 and mt10.num_envs == 10
    obs, _ = mt10.reset()
    assert obs.shape == (10, 39 + 10) and obs.dtype == np.float32
    assert mt10.single_observation_space.shape == (49,) and mt10.single_action_space.shape == (4,)
    np.testing.assert_array_equal(obs[:, 39:], np.eye(10, dtype=np.float32))
    obs, rew, term, trunc, info = mt10.step(np.zeros((10, 4), np.float32))
    np.testing.assert_array_equal(obs[:, 39:], np.eye(10, dtype=np.float32))
    assert rew.dtype == np.float32 and info["success"].shape == (10,) and info["success"].dtype == np.float32
    assert mt10.max_episode_steps == 150 and not term.any() and not trunc.any()


@pytest.mark.integration  # builds MT10
def test_mt10_mtrl_goals_are_fixed_and_shared_with_the_eval_env(mt10):
    mt10.reset()
    goals = mt10.goal_index.copy()
    first = mt10.observations()[:, GOAL]
    mt10.reset()
    np.testing.assert_array_equal(mt10.goal_index, goals)
    np.testing.assert_array_equal(mt10.observations()[:, GOAL], first)
    evaluation = make_env("mt10", seed=0, protocol="mtrl", eval=True)  # same seed: cached benchmark
    np.testing.assert_array_equal(evaluation.goal_index, goals)


@pytest.mark.integration  # Meta-World episodes
def test_mtrl_evaluation_episodes_repeat_exactly():
    # fixed goal, fixed initial state, deterministic physics: a deterministic policy's episodes are
    # one episode repeated, so the mtrl protocol evaluates 1 episode per task (more cost, same number)
    evaluation = make_env("mt1:push-v3", seed=0, protocol="mtrl", eval=True)

    def policy(obs):  # deterministic in the observation, not in the call count
        return np.tanh(np.stack([obs[:, 0] * 7, obs[:, 1] * 5, obs[:, 4] * 3, np.sin(obs[:, 2] * 40)], 1))

    once = evaluate_policy(evaluation, policy, 1)
    thrice = evaluate_policy(evaluation, policy, 3)
    assert thrice["episodes"].tolist() == [3] and once["return"][0] > 0
    np.testing.assert_allclose(thrice["return"], once["return"], rtol=1e-12)  # (3x)/3 may round
    assert default_eval_episodes("mtrl") == 1


@pytest.mark.integration  # Meta-World episodes
def test_sub_env_matches_metaworld_built_independently():
    env = make_env("mt1:push-v3", seed=4, protocol="metaworld_v3", envs_per_task=2)
    obs, _ = env.reset()
    bench = metaworld.MT1("push-v3", seed=4)
    ref = bench.train_classes["push-v3"]()
    ref.set_task(bench.train_tasks[int(env.goal_index[1])])
    ref_obs, _ = ref.reset()
    np.testing.assert_allclose(obs[1, :39], ref_obs, rtol=1e-6, atol=1e-6)
    actions = np.random.default_rng(0).uniform(-1, 1, (5, 2, 4)).astype(np.float32)
    for a in actions:
        obs, rew, _, _, info = env.step(a)
        ref_obs, ref_rew, _, _, ref_info = ref.step(a[1])
        np.testing.assert_allclose(obs[1, :39], ref_obs, rtol=1e-6, atol=1e-6)
        assert rew[1] == pytest.approx(ref_rew, rel=1e-6) and info["success"][1] == ref_info["success"]


def test_truncation_and_same_step_autoreset_with_final_obs():
    env = make_env("mt1:reach-v3", seed=0, protocol="mtrl", max_episode_steps=4)
    start, _ = env.reset()
    a = np.full((1, 4), 0.7, np.float32)
    for _ in range(3):
        obs, _, _, trunc, info = env.step(a)
        assert not trunc.any()
        np.testing.assert_array_equal(info["final_obs"], obs)
    obs, _, term, trunc, info = env.step(a)
    assert trunc.all() and not term.any() and info["episode_length"][0] == 4
    np.testing.assert_array_equal(obs, start)  # mtrl: same goal, MuJoCo reset is deterministic
    assert np.abs(info["final_obs"][0, :3] - start[0, :3]).max() > 0.01  # the hand moved
    obs, *_ = env.step(a)  # and the next episode runs (Meta-World would raise past its limit)


@pytest.mark.integration  # Meta-World episodes
def test_scripted_policy_success_is_reported_per_step_and_per_episode():
    env = make_env("mt1:reach-v3", seed=0, protocol="metaworld_v3", max_episode_steps=60)
    policy = ENV_POLICY_MAP["reach-v3"]()
    obs, _ = env.reset()
    seen = 0.0
    for _ in range(60):
        obs, _, _, trunc, info = env.step(policy.get_action(obs[0, :39].astype(np.float64))[None])
        seen = max(seen, info["success"][0])
    assert seen == 1.0 and trunc[0] and info["episode_success"][0] == 1.0
    evaluation = make_env("mt1:reach-v3", seed=0, protocol="metaworld_v3", max_episode_steps=60, eval=True)
    res = evaluate_policy(evaluation, lambda o: policy.get_action(o[0, :39].astype(np.float64))[None], 3)
    np.testing.assert_array_equal(res["success"], [1.0])
    assert res["task_names"] == ["reach-v3"]
    # The zero action never reaches the goal.
    res = evaluate_policy(evaluation, lambda o: np.zeros((1, 4)), 2)
    np.testing.assert_array_equal(res["success"], [0.0])


@pytest.mark.integration  # Meta-World episodes
def test_metaworld_v3_seeding():
    actions = np.random.default_rng(0).uniform(-1, 1, (12, 2, 4)).astype(np.float32)
    a, b, c = (
        make_env("mt1:reach-v3", seed=s, protocol="metaworld_v3", max_episode_steps=3, envs_per_task=2)
        for s in (1, 1, 2)
    )
    for env in (a, b, c):
        env.reset()
    ra, rb, rc = run(a, actions), run(b, actions), run(c, actions)
    for x, y in zip(ra, rb):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)
    goals_a = np.stack([o[0][:, GOAL] for o in ra]).reshape(-1, 3)
    goals_c = np.stack([o[0][:, GOAL] for o in rc]).reshape(-1, 3)
    assert not np.allclose(goals_a, goals_c)  # different seed -> different goals
    assert len(np.unique(goals_a.round(6), axis=0)) > 2  # goals re-sampled at resets
    # reset(seed=) re-seeds the goal stream
    np.testing.assert_array_equal(c.reset(seed=1)[0], a.reset(seed=1)[0])


def test_metaworld_v3_evaluation_visits_every_goal_once():
    env = make_env("mt1:reach-v3", seed=0, protocol="metaworld_v3", max_episode_steps=1, eval=True)
    env.reset()
    seen = [int(env.goal_index[0])]
    for _ in range(49):
        env.step(np.zeros((1, 4)))
        seen.append(int(env.goal_index[0]))
    assert sorted(seen) == list(range(50))


@pytest.mark.integration  # Meta-World episodes
def test_state_dict_restores_goal_streams_and_starts_fresh_episodes():
    actions = np.random.default_rng(1).uniform(-1, 1, (7, 1, 4)).astype(np.float32)
    env = make_env("mt1:reach-v3", seed=3, protocol="metaworld_v3", max_episode_steps=2)
    env.reset()
    run(env, actions)
    state = env.state_dict()
    torch.save(state, "/dev/null")  # checkpoints go through torch.save
    env.reset()  # an uninterrupted env starting fresh episodes now ...
    expected = (env.observations(), env.goal_index.copy(), run(env, actions))
    # ... is what a resumed one does (even one built with another seed: the goals follow the state)
    restored = make_env("mt1:reach-v3", seed=5, protocol="metaworld_v3", max_episode_steps=2)
    restored.load_state_dict(state)
    np.testing.assert_array_equal(restored.observations(), expected[0])
    np.testing.assert_array_equal(restored.goal_index, expected[1])
    for x, y in zip(expected[2], run(restored, actions)):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)
    with pytest.raises(ValueError, match="tasks"):
        make_env("mt1:push-v3", seed=3, protocol="metaworld_v3").load_state_dict(state)
    with pytest.raises(ValueError, match="protocol"):
        make_env("mt1:reach-v3", seed=3, protocol="mtrl").load_state_dict(state)


def test_bad_names_are_rejected():
    with pytest.raises(ValueError, match="valid names: .*mt10"):
        make_env("mt20", seed=0)
    with pytest.raises(ValueError, match="valid tasks: .*reach-v3"):
        make_env("mt1:reach-v9", seed=0)
    with pytest.raises(ValueError, match="valid protocols: mtrl, metaworld_v3"):
        make_env("mt10", seed=0, protocol="mt_rand")


@pytest.mark.integration  # builds MT50
def test_mt50_builds_with_one_hot():
    env = make_env("mt50", seed=0, protocol="metaworld_v3")
    obs, _ = env.reset()
    assert obs.shape == (50, 39 + 50)
    np.testing.assert_array_equal(obs[:, 39:], np.eye(50, dtype=np.float32))
    env.step(np.zeros((50, 4)))


def _actions(env, steps, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, size=(steps, env.num_envs, env.single_action_space.shape[0])).astype(np.float32)


# -- Meta-World reward version -------------------------------------------------------------
@pytest.fixture(scope="module")
def mt10_v1():
    return make_env("mt10", seed=0, protocol="mtrl", reward_function_version="v1")


@pytest.mark.integration  # builds MT10
def test_v1_reward_is_meta_worlds_v1_reward_function(mt10_v1):
    env = mt10_v1
    env.reset()
    action = _actions(env, 1, seed=3)[0]
    _, reward, _, _, _ = env.step(action)
    bench = metaworld.MT10(seed=0)  # Meta-World's own objects, outside our wrapper
    v2_differs = 0
    for i, name in enumerate(env.task_names):
        task = [t for t in bench.train_tasks if t.env_name == name][env.goal_index[i]]
        expected = {}
        for version in ("v1", "v2"):
            direct = bench.train_classes[name](reward_function_version=version)
            direct.set_task(task)
            direct.reset()
            expected[version] = direct.step(action[i])[1]
            direct.close()
        assert reward[i] == np.float32(expected["v1"]), name
        v2_differs += not math.isclose(expected["v1"], expected["v2"])
    assert v2_differs >= 8  # different functions: 10 of 10 tasks differ for action seeds 3, 4, 5 (measured)


def test_v2_is_the_default_and_bad_versions_are_refused():
    with pytest.raises(ValueError, match="v1, v2"):
        make_env("mt1:reach-v3", seed=0, reward_function_version="v3")
    with pytest.raises(ValueError, match="Meta-World only"):
        make_env("point_mass", seed=0, reward_function_version="v1")
    assert make_env("mt1:reach-v3", seed=0).reward_function_version == "v2"
