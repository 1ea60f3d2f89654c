"""The SAC agents' shared bookkeeping (agents/rl/sac_state.py): skipped-update counters by hand,
and the state of networks, optimizers and temperature through a round trip."""

import torch

import morl
from morl.agents.rl.mtsac import MTSAC, MTSACConfig


def _agent(seed=0):
    return MTSAC(3, 2, 2, MTSACConfig(hidden_sizes=[4], batch_size=4), morl.build("mean"), "cpu", seed)


def test_the_counters_count_total_streak_and_longest_run():
    agent = _agent()
    outcomes = [True, False, False, True, False, False, False, True, False]
    seen = [agent._count_nonfinite(torch.tensor(ok)) for ok in outcomes]
    # by hand: skipped 6 in total; the streak after each update; the longest run 3
    assert [int(s["nonfinite_updates"]) for s in seen] == [0, 1, 2, 2, 3, 4, 5, 5, 6]
    assert [int(s["nonfinite_streak"]) for s in seen] == [0, 1, 2, 0, 1, 2, 3, 0, 1]
    assert int(agent.nonfinite_longest) == 3


def test_a_state_round_trip_restores_parts_temperature_and_counters():
    agent, other = _agent(0), _agent(1)
    agent._count_nonfinite(torch.tensor(False))
    with torch.no_grad():
        agent.log_alpha.fill_(-1.5)
    state = agent._sac_state()
    other.actor_opt.param_bound = torch.tensor(1.0)
    other._load_sac_state(state)
    for name in ("actor", "critic", "critic_target"):
        assert all(
            torch.equal(a, b) for a, b in zip(getattr(agent, name).parameters(), getattr(other, name).parameters())
        )
    assert (
        bool((other.log_alpha == -1.5).all())
        and int(other.nonfinite_updates) == 1
        and int(other.nonfinite_longest) == 1
    )
    assert other.actor_opt.param_bound is None  # measured again at the next step
    del state["nonfinite_streak"], state["nonfinite_longest"]  # an older checkpoint: no streak known
    other._load_sac_state(state)
    assert int(other.nonfinite_streak) == 0 and int(other.nonfinite_updates) == 1
