"""One step of a multi-objective run: the P transitions the replay stores are exactly what the
MO-Gymnasium env returned (vector rewards, ``final_obs`` as next observation where an episode
ended, ``terminated`` and not ``truncated``), without the task one-hot; policy p acts in sub-env p."""

import numpy as np
import torch

from morl.runners.mo.config import load_mo_config
from morl.runners.mo.session import build_session, iterate
from morl.runners.rl.metrics import SectionTimer
from tests.runners.mo.runs import QUICK, TINY


def test_the_replay_holds_what_the_env_returned(monkeypatch):
    # Hopper under random actions falls (terminated) within a few dozen steps; 12-step episodes truncate
    cfg = load_mo_config(QUICK, [*TINY, "env.name=mo-hopper-v5", "agent.population=3", "env.max_episode_steps=12",
                                 "run.warmup_steps=40"])  # fmt: skip
    s = build_session(cfg)
    seen = []
    real_step = s.env.step

    def recording_step(actions):
        out = real_step(actions)
        seen.append((s.obs.copy(), actions.copy(), *[np.copy(x) for x in out[1:4]], out[4]["final_obs"].copy()))
        return out

    monkeypatch.setattr(s.env, "step", recording_step)
    for _ in range(40):
        iterate(s, SectionTimer())
    obs, actions, reward, terminated, truncated, final_obs = (np.stack(x) for x in zip(*seen))
    assert terminated.any() and truncated.any() and not (terminated & truncated).any()
    assert reward.shape == (40, 3, 3) and not np.allclose(reward[..., 1], reward[..., 2])  # three objectives
    stored = {k: v[0, :120].numpy() for k, v in s.replay.storage.items()}  # step t, sub-env p -> row 3t + p
    assert np.array_equal(stored["reward"], reward.reshape(120, 3))
    assert np.array_equal(stored["obs"], obs.reshape(120, -1))
    assert np.array_equal(stored["action"], actions.reshape(120, -1))
    assert np.array_equal(stored["next_obs"], final_obs[..., :-1].reshape(120, -1))  # the one-hot (1.0) dropped
    assert np.array_equal(stored["terminated"], terminated.reshape(120).astype(np.float32))
    assert np.all(final_obs[..., -1] == 1.0) and s.replay.storage["obs"].shape[-1] == 11
    ended = (terminated | truncated).reshape(120)
    next_rows = np.concatenate([obs[1:], s.obs[None]]).reshape(120, -1)
    # where an episode ended the stored next observation is its last one, not the reset's first
    assert not np.allclose(stored["next_obs"][ended], next_rows[ended])
    assert np.array_equal(stored["next_obs"][~ended], next_rows[~ended])


def test_policy_p_acts_in_sub_env_p():
    cfg = load_mo_config(QUICK, [*TINY, "run.warmup_steps=0"])
    s = build_session(cfg)
    with torch.no_grad():
        s.agent.actor.biases[-1][1, 0, :6] = 50.0  # policy 1's actions saturate at +1
    calls = []
    real_step = s.env.step
    s.env.step = lambda actions: calls.append(actions.copy()) or real_step(actions)
    iterate(s, SectionTimer())
    assert np.all(calls[0][1] > 0.99) and not np.all(calls[0][0] > 0.99)
    assert s.updates == 1  # no warm-up: the first step already updates
