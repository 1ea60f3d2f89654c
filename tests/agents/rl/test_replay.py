"""MultiTaskReplay: per-task rings, stratified sampling, wrap-around, state round trip."""

import io

import numpy as np
import pytest
import torch

from morl.agents.rl.replay import MultiTaskReplay

T, OBS, ACT = 3, 4, 2


def _step(buffer, tasks, marker):
    """Add one transition per entry of ``tasks`` whose obs[0] = task id and obs[1] = marker."""
    n = len(tasks)
    obs = np.zeros((n, OBS), np.float32)
    obs[:, 0] = tasks
    obs[:, 1] = marker
    buffer.add(np.asarray(tasks), obs, np.ones((n, ACT)), np.full(n, marker, np.float32), obs + 1, np.zeros(n, bool))


def test_sample_shapes_and_rows_hold_their_own_task(gen):
    buf = MultiTaskReplay(T, 10, OBS, ACT)
    for i in range(5):
        _step(buf, list(range(T)), i)
    batch = buf.sample(7, gen)
    assert set(batch) == {"obs", "action", "reward", "next_obs", "terminated"}
    assert batch["obs"].shape == (T, 7, OBS) and batch["action"].shape == (T, 7, ACT)
    assert batch["reward"].shape == (T, 7) and batch["terminated"].shape == (T, 7)
    for t in range(T):
        assert torch.all(batch["obs"][t, :, 0] == t)
    assert torch.equal(batch["next_obs"], batch["obs"] + 1)
    assert torch.equal(batch["reward"], batch["obs"][..., 1])


def test_uniform_within_stored_data_only(gen):
    buf = MultiTaskReplay(T, 100, OBS, ACT)
    for i in range(6):  # task t gets 6, 12, 18 transitions (envs_per_task-like repeats in one add)
        _step(buf, [0] + [1] * 2 + [2] * 3, i)
    assert buf.sizes().tolist() == [6, 12, 18] and len(buf) == 6
    markers = buf.sample(20000, gen)["obs"][..., 1]
    for t in range(T):
        counts = torch.bincount(markers[t].long(), minlength=6).float()
        assert counts.numel() == 6  # never beyond the stored data
        expected = 20000 / 6
        assert torch.all((counts - expected).abs() < 0.1 * expected), counts


def test_several_transitions_of_one_task_get_consecutive_slots():
    buf = MultiTaskReplay(T, 8, OBS, ACT)
    _step(buf, [2, 0, 2, 2], 5)
    assert buf.sizes().tolist() == [1, 0, 3]
    assert torch.all(buf.storage["obs"][2, :3, 0] == 2) and torch.all(buf.storage["obs"][2, 3:, 0] == 0)


def test_ring_wraps_and_keeps_the_latest(gen):
    buf = MultiTaskReplay(T, 4, OBS, ACT)
    for i in range(10):
        _step(buf, list(range(T)), i)
    assert len(buf) == 4
    seen = set(buf.sample(2000, gen)["obs"][..., 1].unique().tolist())
    assert seen == {6.0, 7.0, 8.0, 9.0}


def test_state_dict_round_trip_gives_identical_samples():
    buf = MultiTaskReplay(T, 5, OBS, ACT)
    for i in range(7):
        _step(buf, [0, 1, 2, 2], i)
    raw = io.BytesIO()
    torch.save(buf.state_dict(), raw)
    other = MultiTaskReplay(T, 5, OBS, ACT)
    other.load_state_dict(torch.load(io.BytesIO(raw.getvalue()), weights_only=False))
    a = buf.sample(9, torch.Generator().manual_seed(3))
    b = other.sample(9, torch.Generator().manual_seed(3))
    assert all(torch.equal(a[k], b[k]) for k in a)
    _step(buf, [1], 99)  # the write pointers came along too
    _step(other, [1], 99)
    assert torch.equal(buf.storage["obs"], other.storage["obs"])


def test_bad_input_is_rejected():
    buf = MultiTaskReplay(T, 5, OBS, ACT)
    with pytest.raises(ValueError, match="task ids"):
        _step(buf, [3], 0)
    with pytest.raises(ValueError, match="obs_dim"):
        MultiTaskReplay(T, 5, OBS + 1, ACT).load_state_dict(buf.state_dict())
    with pytest.raises(ValueError, match="capacity_per_task"):
        MultiTaskReplay(T, 0, OBS, ACT)


def test_vector_rewards_are_stored_and_sampled_as_rows():
    buf = MultiTaskReplay(1, 4, OBS, ACT, reward_dim=3)
    rewards = np.arange(15, dtype=np.float32).reshape(5, 3)  # 5 transitions into a ring of 4
    buf.add(np.zeros(5, np.int64), np.zeros((5, OBS)), np.zeros((5, ACT)), rewards, np.zeros((5, OBS)), np.zeros(5))
    assert buf.storage["reward"].shape == (1, 4, 3)
    # the ring keeps the latest 4: transition 4 overwrote slot 0
    assert torch.equal(buf.storage["reward"][0], torch.as_tensor(rewards[[4, 1, 2, 3]]))
    sample = buf.sample(6, torch.Generator().manual_seed(0))["reward"][0]
    assert sample.shape == (6, 3) and all(row.tolist() in rewards[1:].tolist() for row in sample)
    scalar = MultiTaskReplay(1, 4, OBS, ACT)
    with pytest.raises(ValueError, match="reward_dim"):
        scalar.load_state_dict(buf.state_dict())
    with pytest.raises(ValueError, match="reward_dim"):
        MultiTaskReplay(1, 4, OBS, ACT, reward_dim=0)
