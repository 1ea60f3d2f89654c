"""MO-Gymnasium's MuJoCo tasks behind the vector-env contract, checked against MO-Gymnasium's own
environments (``mo_gymnasium.make``) stepped side by side with the same seeds and actions."""

import mo_gymnasium
import numpy as np
import pytest

from morl.envs import available_envs, evaluate_policy, evaluate_preferences, make_env, mo_env_names, reference_point

OBJECTIVES = {
    "mo-halfcheetah-v5": 2,
    "mo-hopper-v5": 3,
    "mo-hopper-2obj-v5": 2,
    "mo-walker2d-v5": 2,
    "mo-swimmer-v5": 2,
}


def seed_of(seed, i, stream=0):
    """The documented first-episode seed of sub-env i (0: training stream, 1: evaluation stream)."""
    return int(np.random.SeedSequence([seed, stream, i]).generate_state(1)[0])


def references(name, n, seed, max_episode_steps=None, stream=0):
    kwargs = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    refs = [mo_gymnasium.make(name, **kwargs) for _ in range(n)]
    return refs, [ref.reset(seed=seed_of(seed, i, stream))[0] for i, ref in enumerate(refs)]


def test_every_task_has_mo_gymnasiums_spaces_and_the_standard_reference_point():
    assert set(mo_env_names()) == set(OBJECTIVES) and set(OBJECTIVES) <= set(available_envs())
    for name, m in OBJECTIVES.items():
        env = make_env(name, seed=0, envs_per_task=2)
        ref = mo_gymnasium.make(name)
        assert env.reward_dim == m == ref.unwrapped.reward_space.shape[0] == len(env.objective_names)
        assert env.num_tasks == 1 and env.num_envs == 2 and env.task_ids.tolist() == [0, 0]
        assert env.max_episode_steps == ref.spec.max_episode_steps == 1000
        assert env.single_action_space.shape == ref.action_space.shape
        assert env.single_observation_space.shape == (ref.observation_space.shape[0] + 1,)
        # MORL-Baselines' reference point for its MuJoCo tasks: -100 in every objective
        np.testing.assert_array_equal(env.ref_point, np.full(m, -100.0))
        np.testing.assert_array_equal(reference_point(name), env.ref_point)
        obs, _ = env.reset()
        assert obs.dtype == np.float32 and (obs[:, -1] == 1.0).all()
        _, reward, *_, info = env.step(np.zeros((2, env.single_action_space.shape[0]), np.float32))
        assert reward.shape == (2, m) and reward.dtype == np.float32 and info["episode_return"].shape == (2, m)


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_reward_vectors_observations_and_episode_ends_are_mo_gymnasiums(name):
    n, seed, steps, horizon = 2, 3, 70, 25
    env = make_env(name, seed=seed, envs_per_task=n, max_episode_steps=horizon)
    refs, ref_obs = references(name, n, seed, max_episode_steps=horizon)
    obs, _ = env.reset()
    raw = obs.shape[1] - 1
    np.testing.assert_array_equal(obs[:, :raw], np.float32(ref_obs))
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(steps):
        actions = rng.uniform(-1, 1, size=(n, env.single_action_space.shape[0])).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(actions)
        for i, ref in enumerate(refs):
            r_obs, r_reward, r_term, r_trunc, _ = ref.step(actions[i])
            np.testing.assert_array_equal(reward[i], r_reward)  # MO-Gymnasium's vector, bit for bit
            assert (terminated[i], truncated[i]) == (r_term, r_trunc)
            np.testing.assert_array_equal(info["final_obs"][i, :raw], np.float32(r_obs))  # the true last one
            if r_term or r_trunc:
                ends["terminated" if r_term else "truncated"] += 1
                r_obs, _ = ref.reset()  # the next episode continues the sub-env's generator
            np.testing.assert_array_equal(obs[i, :raw], np.float32(r_obs))
    assert ends["truncated"] + ends["terminated"] >= n  # every sub-env ended an episode at least once
    if name.startswith("mo-hopper"):  # hopper falls under random actions: termination was exercised
        assert ends["terminated"] > 0


def test_episode_return_is_the_sum_of_the_reward_vectors():
    env = make_env("mo-hopper-v5", seed=1, envs_per_task=2, max_episode_steps=15)
    env.reset()
    total = np.zeros((2, 3))
    for _ in range(15):
        _, reward, terminated, truncated, info = env.step(np.full((2, 3), 0.3, np.float32))
        total += reward
        done = terminated | truncated
        np.testing.assert_allclose(info["episode_return"][done], total[done], rtol=1e-6)
        total[done] = 0.0
    assert done.all()


def test_seeding_and_the_evaluation_stream():
    def first_obs(**kw):
        return make_env("mo-walker2d-v5", envs_per_task=2, **kw).reset()[0]

    np.testing.assert_array_equal(first_obs(seed=5), first_obs(seed=5))
    assert not np.array_equal(first_obs(seed=5), first_obs(seed=6))
    evaluation = first_obs(seed=5, eval=True)
    assert not np.array_equal(evaluation, first_obs(seed=5))
    _, ref_obs = references("mo-walker2d-v5", 2, 5, stream=1)
    np.testing.assert_array_equal(evaluation[:, :-1], np.float32(ref_obs))
    env = make_env("mo-walker2d-v5", seed=5, envs_per_task=2)
    env.reset()
    env.step(np.ones((2, 6), np.float32))
    np.testing.assert_array_equal(env.reset(seed=5)[0], first_obs(seed=5))  # reset(seed) re-seeds everything


def test_state_dict_continues_mid_episode_bit_for_bit():
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(40, 2, 3)).astype(np.float32)
    env = make_env("mo-hopper-v5", seed=2, envs_per_task=2, max_episode_steps=30)
    env.reset()
    for a in actions[:12]:
        env.step(a)
    state = env.state_dict()
    later = [env.step(a) for a in actions[12:]]
    twin = make_env("mo-hopper-v5", seed=99, envs_per_task=2, max_episode_steps=30)
    twin.load_state_dict(state)
    np.testing.assert_array_equal(twin.observations(), state["obs"])
    for a, (obs, reward, terminated, truncated, info) in zip(actions[12:], later):
        t_obs, t_reward, t_term, t_trunc, t_info = twin.step(a)
        np.testing.assert_array_equal(t_obs, obs)
        np.testing.assert_array_equal(t_reward, reward)
        assert t_term.tolist() == terminated.tolist() and t_trunc.tolist() == truncated.tolist()
        np.testing.assert_array_equal(t_info["episode_return"], info["episode_return"])
    with pytest.raises(ValueError, match="environment state is for"):
        make_env("mo-swimmer-v5", seed=0, envs_per_task=2).load_state_dict(state)


def test_evaluate_policy_reports_vector_returns():
    env = make_env("mo-swimmer-v5", seed=0, envs_per_task=2, max_episode_steps=10)
    result = evaluate_policy(env, lambda obs: np.full((2, 2), 0.5, np.float32), 2)
    refs, _ = references("mo-swimmer-v5", 2, 0, max_episode_steps=10)
    per_env = [sum(ref.step(np.full(2, 0.5, np.float32))[1].astype(np.float64) for _ in range(10)) for ref in refs]
    assert result["return"].shape == (1, 2) and result["episodes"].tolist() == [2]
    np.testing.assert_allclose(result["return"][0], np.mean(per_env, axis=0), rtol=1e-6)


def test_evaluate_preferences_gives_each_preference_its_discounted_vector_return():
    weights = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    gamma, horizon = 0.9, 12

    def policy(obs, w):  # the preference sets the action: a different trajectory per row
        return np.tile((w[:, :1] - w[:, 1:]) * 0.8, (1, 6)).astype(np.float32)

    env = make_env("mo-halfcheetah-v5", seed=4, envs_per_task=2, max_episode_steps=horizon)
    result = evaluate_preferences(env, policy, weights, gamma=gamma)
    # by hand: 3 preferences on 2 sub-envs are two groups, each from env.reset() (no new seed): the
    # first group starts from the seeded states; sub-env 0 of the second has reset twice since (the
    # autoreset that ended its first episode, then env.reset()), drawing from its own generator
    refs, _ = references("mo-halfcheetah-v5", 2, 4, max_episode_steps=horizon)
    expected, expected_disc = [], []
    for k, w in enumerate(weights):
        ref = refs[k % 2]
        if k >= 2:
            ref.reset()
            ref.reset()
        ret, disc = np.zeros(2), np.zeros(2)
        for t in range(horizon):
            r = ref.step(policy(None, w[None])[0])[1]
            ret, disc = ret + r, disc + gamma**t * r
        expected.append(ret)
        expected_disc.append(disc)
    np.testing.assert_allclose(result["return"], expected, rtol=1e-6)
    np.testing.assert_allclose(result["discounted_return"], expected_disc, rtol=1e-6)
    assert result["episodes"].tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match=r"weights must have shape \[W >= 1, 2\]"):
        evaluate_preferences(env, policy, np.ones((3, 3)))


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="reward_normalization 'running' scales scalar rewards"):
        make_env("mo-hopper-v5", seed=0, reward_normalization="running")
    with pytest.raises(ValueError, match="exists for Meta-World only"):
        make_env("mo-hopper-v5", seed=0, reward_function_version="v1")
    with pytest.raises(ValueError, match="unknown env 'mo-ant-v5'; valid names: .*mo-hopper-v5"):
        make_env("mo-ant-v5", seed=0)
    with pytest.raises(ValueError, match="envs_per_task must be >= 1"):
        make_env("mo-hopper-v5", seed=0, envs_per_task=0)
    with pytest.raises(ValueError, match="needs a multi-objective env"):
        evaluate_preferences(make_env("point_mass", seed=0), lambda o, w: o[:, :2], np.ones((1, 2)))
