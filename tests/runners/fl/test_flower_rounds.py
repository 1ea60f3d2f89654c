"""Flower's round loop handed out one round at a time (``engine.name: flower``), on a stand-in for
``flower_engine.run`` that loops like Flower's ServerApp (a round, then ``on_round``): one round per
``next_round()``, a stop ends the loop between rounds, failures and early ends are named in one
line with the round, and a missing Flower is a one-line hint."""

from __future__ import annotations

import sys
import threading
import types

import pytest

import morl.agents.federated
from morl.runners.errors import UserError
from morl.runners.fl.flower_rounds import FlowerRounds

ENGINE = "morl.agents.federated.flower_engine"


class FakeFlower:
    """``run`` as Flower's server loop: while rounds remain, run one, then call ``on_round``."""

    def __init__(self, fail_before=None, last=None):
        self.calls, self.rounds_run, self.fail_before, self.last = [], [], fail_before, last

    def run(self, fed, local, seed, rounds, on_round, num_cpus, cpus_per_client):
        self.calls.append((fed, local, seed, rounds, num_cpus, cpus_per_client, threading.current_thread().name))
        while fed.round < min(rounds, self.last or rounds):
            if fed.round + 1 == self.fail_before:
                raise ValueError("a ClientApp crashed")
            fed.round += 1
            self.rounds_run.append(fed.round)
            on_round(fed.round)


@pytest.fixture
def flower(monkeypatch):
    def install(**kw):
        fake = FakeFlower(**kw)
        module = types.ModuleType(ENGINE)
        module.run = fake.run
        monkeypatch.setitem(sys.modules, ENGINE, module)
        monkeypatch.setattr(morl.agents.federated, "flower_engine", module, raising=False)
        return fake

    return install


def _rounds(rounds=3, start=0):
    fed = types.SimpleNamespace(round=start)
    return fed, FlowerRounds(fed, "local", 7, rounds, 2, 0.5)


def test_each_next_round_runs_exactly_one_round_of_one_simulation(flower):
    fake = flower()
    fed, rounds = _rounds(3)
    rounds.next_round()
    assert fed.round == 1 and fake.rounds_run == [1]  # the server thread is parked after round 1
    rounds.next_round()
    rounds.next_round()
    assert fed.round == 3 and fake.rounds_run == [1, 2, 3]
    assert fake.calls == [(fed, "local", 7, 3, 2, 0.5, "flower-simulation")]  # started once, in its own thread
    with pytest.raises(RuntimeError, match="^the Flower simulation was started for 3 rounds; all are done$"):
        rounds.next_round()
    rounds.close()
    assert not rounds._thread.is_alive()  # after the last round Flower's loop ends by itself


def test_a_resumed_federation_goes_on_from_its_round(flower):
    fake = flower()
    fed, rounds = _rounds(4, start=2)
    rounds.next_round()
    assert fed.round == 3 and fake.rounds_run == [3]
    rounds.close()


def test_close_between_rounds_ends_the_simulation_without_another_round(flower):
    fake = flower()
    fed, rounds = _rounds(3)
    rounds.next_round()
    rounds.close()
    assert not rounds._thread.is_alive()
    assert fed.round == 1 and fake.rounds_run == [1]


def test_close_before_the_first_round_starts_nothing(flower):
    fake = flower()
    _, rounds = _rounds(3)
    rounds.close()
    assert fake.calls == [] and rounds._thread is None


def test_a_failure_in_the_simulation_names_the_round_and_keeps_its_cause(flower):
    flower(fail_before=2)
    fed, rounds = _rounds(3)
    rounds.next_round()
    with pytest.raises(RuntimeError, match="^the Flower simulation failed in round 2: a ClientApp crashed$") as err:
        rounds.next_round()
    assert isinstance(err.value.__cause__, ValueError) and fed.round == 1


def test_a_simulation_that_ends_early_names_the_missing_round(flower):
    flower(last=1)  # Flower's loop returns after one round of three
    fed, rounds = _rounds(3)
    rounds.next_round()
    with pytest.raises(RuntimeError, match="^the Flower simulation ended before round 2$"):
        rounds.next_round()


def test_without_flower_the_engine_is_a_one_line_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, ENGINE, None)  # import fails as when flwr is missing
    monkeypatch.delattr(morl.agents.federated, "flower_engine", raising=False)
    with pytest.raises(UserError, match=r"^engine.name=flower needs Flower: pip install 'morl\[fl\]' \("):
        _rounds(3)
