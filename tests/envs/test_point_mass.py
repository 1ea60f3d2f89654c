"""The fast multi-task env: contract (shapes, one-hot, autoreset, seeding, state) and its physics."""

import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from morl.envs import default_eval_episodes, evaluate_policy, make_env
from morl.envs.point_mass import PointMassEnv


def oracle(env):
    """Head straight for the task's goal (reads the goal from the env, which the agent cannot)."""

    def act(obs):
        goal = env.goals[obs[:, -env.num_tasks :].argmax(1)]
        return np.clip((goal - obs[:, :2]) / (env.dt * env.max_speed), -1, 1)

    return act


def rollout(env, actions):
    out = []
    for a in actions:
        obs, rew, term, trunc, info = env.step(a)
        out.append((obs, rew, term, trunc, info["final_obs"], info["success"]))
    return out


def test_spaces_one_hot_and_task_grouping():
    env = make_env("point_mass", seed=0, num_tasks=3, envs_per_task=2)
    assert isinstance(env, gym.vector.VectorEnv)
    assert env.num_envs == 6 and env.num_tasks == 3 and env.task_names == ["goal-0", "goal-1", "goal-2"]
    np.testing.assert_array_equal(env.task_ids, [0, 0, 1, 1, 2, 2])
    assert env.task_ids.dtype == np.int64
    obs, _ = env.reset()
    assert obs.shape == (6, 4 + 3) and obs.dtype == np.float32
    assert env.single_observation_space.shape == (7,) and env.single_observation_space.dtype == np.float32
    assert env.single_action_space.shape == (2,)
    np.testing.assert_array_equal(env.single_action_space.low, -1)
    np.testing.assert_array_equal(obs[:, -3:], np.eye(3, dtype=np.float32)[env.task_ids])
    obs, rew, term, trunc, info = env.step(np.zeros((6, 2), np.float32))
    assert rew.dtype == np.float32 and rew.shape == (6,) and term.dtype == bool and trunc.dtype == bool
    assert info["success"].dtype == np.float32 and info["final_obs"].dtype == np.float32
    np.testing.assert_array_equal(obs[:, -3:], np.eye(3, dtype=np.float32)[env.task_ids])


def test_goals_evenly_spaced_and_conflicting():
    env = PointMassEnv(num_tasks=4)
    np.testing.assert_allclose(np.linalg.norm(env.goals, axis=1), 1.0)
    # Tasks 0/2 and 1/3 want exactly opposite actions from the start.
    np.testing.assert_allclose(env.goals[0], -env.goals[2], atol=1e-12)
    np.testing.assert_allclose(env.goals[1], -env.goals[3], atol=1e-12)


def test_dynamics_reward_and_success_match_the_definition():
    env = PointMassEnv(num_tasks=2, seed=3)
    obs, _ = env.reset()
    pos = obs[:, :2].astype(np.float64)
    a = np.array([[1.0, 0.5], [-0.25, 1.0]], np.float32)
    obs, rew, _, _, info = env.step(a)
    expect = np.clip(pos + env.dt * env.max_speed * a, -env.arena, env.arena)
    np.testing.assert_allclose(obs[:, :2], expect, atol=1e-6)
    np.testing.assert_allclose(obs[:, 2:4], env.max_speed * a, atol=1e-6)
    dist = np.linalg.norm(expect - env.goals, axis=1)
    np.testing.assert_allclose(rew, -dist + env.success_bonus * (dist < env.success_radius), atol=1e-5)
    np.testing.assert_array_equal(info["success"], (dist < env.success_radius).astype(np.float32))


def test_oracle_succeeds_and_standing_still_fails():
    env = make_env("point_mass", seed=0, eval=True)
    res = evaluate_policy(env, oracle(env), episodes_per_task=3)
    np.testing.assert_array_equal(res["success"], np.ones(4))
    np.testing.assert_array_equal(res["episodes"], [3, 3, 3, 3])
    assert res["task_names"] == env.task_names
    still = evaluate_policy(env, lambda o: np.zeros((4, 2)), episodes_per_task=1)
    np.testing.assert_array_equal(still["success"], np.zeros(4))
    # Standing at the origin for 20 steps costs about the goal distance per step.
    np.testing.assert_allclose(still["return"], -20.0, atol=20 * 0.15)


def test_evaluate_counts_episodes_per_task_across_copies():
    env = make_env("point_mass", seed=0, envs_per_task=2)
    res = evaluate_policy(env, oracle(env), episodes_per_task=4)
    np.testing.assert_array_equal(res["episodes"], [4, 4, 4, 4])
    assert default_eval_episodes("mtrl") == 1 and default_eval_episodes("metaworld_v3") == 50
    with pytest.raises(ValueError, match="valid protocols"):
        default_eval_episodes("bogus")


def test_truncation_and_same_step_autoreset():
    env = make_env("point_mass", seed=0, max_episode_steps=5)
    env.reset()
    a = np.full((4, 2), 0.5, np.float32)
    for _t in range(4):
        obs, _, term, trunc, info = env.step(a)
        assert not trunc.any() and not term.any()
        np.testing.assert_array_equal(info["final_obs"], obs)
    before = obs[:, :2].copy()
    obs, _, term, trunc, info = env.step(a)
    assert trunc.all() and not term.any()
    np.testing.assert_array_equal(info["episode_length"], [5, 5, 5, 5])
    # final_obs is the true last state; obs is already the next episode's first one.
    np.testing.assert_allclose(info["final_obs"][:, :2], before + env.dt * env.max_speed * 0.5, atol=1e-6)
    assert np.abs(obs[:, :2]).max() <= env.init_noise and not obs[:, 2:4].any()
    np.testing.assert_array_equal(info["final_obs"][:, -4:], obs[:, -4:])
    assert (env.episodes_completed == 1).all()


def test_episode_return_and_success_sum_over_the_episode():
    env = make_env("point_mass", seed=0, max_episode_steps=12)
    env.reset()
    act, total = oracle(env), np.zeros(4)
    obs = env.observations()
    hit = np.zeros(4, bool)
    for _ in range(12):
        obs, rew, _, trunc, info = env.step(act(obs))
        total += rew
        hit |= info["success"] > 0
    assert trunc.all()
    np.testing.assert_allclose(info["episode_return"], total, rtol=1e-5)
    np.testing.assert_array_equal(info["episode_success"], hit.astype(np.float32))
    assert hit.all()


def test_seeding_same_seed_same_trajectory_different_seed_differs():
    actions = np.random.default_rng(0).uniform(-1, 1, (40, 4, 2)).astype(np.float32)
    a, b, c = (make_env("point_mass", seed=s, max_episode_steps=10) for s in (5, 5, 6))
    for env in (a, b, c):
        env.reset()
    ra, rb, rc = rollout(a, actions), rollout(b, actions), rollout(c, actions)
    for x, y in zip(ra, rb):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)
    assert not np.array_equal(ra[-1][0], rc[-1][0])
    # reset(seed=) re-seeds: the first observation repeats.
    first, _ = c.reset(seed=5)
    np.testing.assert_array_equal(first, a.reset(seed=5)[0])


def test_state_dict_round_trip_continues_identically():
    actions = np.random.default_rng(1).uniform(-1, 1, (30, 4, 2)).astype(np.float32)
    env = make_env("point_mass", seed=0, max_episode_steps=8)
    env.reset()
    rollout(env, actions[:11])
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)  # checkpoints go through torch.save
    expected = rollout(env, actions[11:])
    restored = make_env("point_mass", seed=123, max_episode_steps=8)
    restored.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=False))
    got = rollout(restored, actions[11:])
    for x, y in zip(expected, got):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(restored.episodes_completed, env.episodes_completed)


def test_the_state_of_an_env_never_reset_restores_to_an_env_never_reset():
    # An evaluation env checkpointed before its first evaluation: restoring must not reset it
    # (a reset draws start positions from the restored generator, one draw too many).
    env = make_env("point_mass", seed=0, eval=True)
    restored = make_env("point_mass", seed=123, eval=True)
    restored.load_state_dict(env.state_dict())
    with pytest.raises(RuntimeError, match="reset"):
        restored.observations()
    np.testing.assert_array_equal(restored.reset()[0], env.reset()[0])


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="valid names"):
        make_env("cartpole", seed=0)
    with pytest.raises(ValueError, match="valid protocols"):
        make_env("point_mass", seed=0, protocol="v2")
    env = make_env("point_mass", seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros((4, 2)))
    env.reset()
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        env.step(np.full((4, 2), np.nan))
    with pytest.raises(ValueError, match="sub-envs"):
        env.load_state_dict(make_env("point_mass", seed=0, num_tasks=2).state_dict())
