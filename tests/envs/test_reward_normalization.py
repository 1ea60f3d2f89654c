"""mtrl's per-task reward normalisation (exponential and running), checked against hand recursions."""

import copy
import math
import pickle

import numpy as np
import pytest

from morl.envs import make_env

STEPS = 40


def _actions(env, steps, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, size=(steps, env.num_envs, env.single_action_space.shape[0])).astype(np.float32)


def _rewards(env, actions):
    out = []
    for a in actions:
        out.append(env.step(a)[1].copy())
    return np.stack(out)


# -- per-task reward normalisation ---------------------------------------------------------
def _pair(method, envs_per_task=1):
    plain = make_env("point_mass", seed=0, num_tasks=3, envs_per_task=envs_per_task)
    scaled = make_env("point_mass", seed=0, num_tasks=3, envs_per_task=envs_per_task, reward_normalization=method)
    plain.reset(seed=0)
    scaled.reset(seed=0)
    return plain, scaled


def test_exponential_normalisation_is_mtrls_wrapper_recursion():
    plain, scaled = _pair("exponential")
    actions = _actions(plain, STEPS)
    raw, got = _rewards(plain, actions), _rewards(scaled, actions)
    for t in range(3):  # garage / mtenv NormalizedEnvWrapper, alpha = 0.001, from mean 0 and var 1
        mean, var = 0.0, 1.0
        for k in range(STEPS):
            r = float(np.float64(raw[k, t]))
            mean = 0.999 * mean + 0.001 * r
            var = 0.999 * var + 0.001 * (r - mean) ** 2
            assert got[k, t] == pytest.approx(r / (math.sqrt(var) + 1e-8), rel=1e-6, abs=1e-7)


def test_running_normalisation_divides_by_the_std_of_all_rewards_so_far():
    plain, scaled = _pair("running", envs_per_task=2)
    actions = _actions(plain, STEPS)
    recorded, simulate = [], plain._sim_step

    def spy(a):  # the float64 rewards of the simulation: two nearly equal rewards make the std ill-conditioned
        out = simulate(a)
        recorded.append(out[1].copy())
        return out

    plain._sim_step = spy
    _rewards(plain, actions)
    raw64 = np.stack(recorded)
    got = _rewards(scaled, actions)
    for t in range(3):
        seen = raw64[:, 2 * t : 2 * t + 2].reshape(-1)  # task t's rewards in the order they were normalised
        for j, r in enumerate(seen):
            std = np.std(seen[: j + 1]) if j >= 1 else None  # numpy's population std as the reference
            expected = r if std is None else r / (std + 1e-8)
            assert got[j // 2, 2 * t + j % 2] == pytest.approx(expected, rel=1e-6, abs=1e-7)
    assert list(scaled.reward_normalizer.count) == [2 * STEPS] * 3


def test_episode_returns_stay_raw_with_normalisation():
    plain, scaled = _pair("exponential")
    for a in _actions(plain, 5):
        info_plain, info_scaled = plain.step(a)[4], scaled.step(a)[4]
    np.testing.assert_array_equal(info_plain["episode_return"], info_scaled["episode_return"])


@pytest.mark.parametrize("method", ["exponential", "running"])
def test_normaliser_state_survives_state_dict_bitwise(method):
    _, env = _pair(method)
    actions = _actions(env, 2 * STEPS, seed=1)
    _rewards(env, actions[:STEPS])
    state = pickle.loads(pickle.dumps(env.state_dict()))
    after = _rewards(env, actions[STEPS:])
    other = make_env("point_mass", seed=5, num_tasks=3, reward_normalization=method)
    other.reset(seed=5)
    other.load_state_dict(copy.deepcopy(state))
    resumed = _rewards(other, actions[STEPS:])
    assert np.array_equal(after, resumed)
    for key in ("mean", "var", "m2", "count"):
        assert np.array_equal(getattr(env.reward_normalizer, key), getattr(other.reward_normalizer, key)), key


def test_normalisation_choices():
    with pytest.raises(ValueError, match="none, exponential, running"):
        make_env("point_mass", seed=0, reward_normalization="welford")
    assert make_env("point_mass", seed=0, reward_normalization="running", eval=True).reward_normalizer is None
    assert make_env("point_mass", seed=0).reward_normalizer is None


def test_the_rl_config_env_options_reach_the_environments():
    from morl.runners.rl.config import load_rl_config
    from morl.runners.rl.session import make_envs

    cfg = load_rl_config(None, ["env.name=point_mass", "env.reward_normalization=running"])
    train_env, eval_env = make_envs(cfg)
    assert train_env.reward_normalizer.method == "running" and eval_env.reward_normalizer is None
