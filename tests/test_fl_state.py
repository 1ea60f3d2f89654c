"""MosTStrategy's state (resuming a MosT federation) without a whole FL run.

tests/test_fl_shell.py resumes a full run; here the strategy alone: after a few rounds
with pair sampling, Γ averaging and the switch rule, ``state_dict`` → a fresh strategy →
``load_state_dict`` must restore every field, and the next rounds must be bit-identical to the
uninterrupted strategy's. A state without the optional keys (an older checkpoint) loads with
their documented starting values.
"""

import io

import pytest
import torch

from morl.agents.federated import strategies as S
from morl.most import MosT

M, N, P = 2, 6, 5


def _strategy(average):
    most = MosT(M, gamma_scale="code", update="code", solver="ipot", warm_start=True)
    kw = dict(gamma_momentum=0.5) if average == "ema" else dict(gamma_average="cumulative")
    return S.MosTStrategy(most, warmup_rounds=1, combine="switch", sample_fraction=0.5, gamma_average_start=1,
                          ot_resolve=1, seed=3, **kw)


def _round(strat, r, gen):
    d = torch.randn(M, N, P, generator=gen, dtype=torch.float64)
    # losses up (round 2: the linear branch) then falling by 20x and more each round, so that
    # once the sampled pairs' fresh losses outweigh the stale cache S drops below its average
    # (the MGDA branch); how many rounds that takes depends on the draws
    scale = (1.0, 1.0, 5.0)[r] if r < 3 else 0.05 ** (r - 2)
    l = scale * (torch.rand(M, N, generator=gen, dtype=torch.float64) + 0.5)
    fresh = strat.sample_pairs(r, M, N)
    if fresh is not None:
        d, l = d * fresh.unsqueeze(-1), l * fresh
    return strat.aggregate(d, l, torch.ones(N), fresh=fresh)


FIELDS = ("rounds_done", "avg_objective", "branches", "gamma_updates", "gamma_count")
TENSORS = ("cache_deltas", "cache_losses", "gamma_avg")


@pytest.mark.parametrize("average", ["ema", "cumulative"])
def test_a_restored_strategy_continues_bit_identically(average):
    strat, gen = _strategy(average), torch.Generator().manual_seed(0)
    r = 0
    while r < 5 or (set(strat.branches) != {"linear", "mgda"} and r < 12):
        _round(strat, r, gen)
        r += 1
    assert set(strat.branches) == {"linear", "mgda"} and strat.gamma_updates > 1
    raw = io.BytesIO()
    torch.save(strat.state_dict(), raw)
    restored = _strategy(average)
    restored.load_state_dict(torch.load(io.BytesIO(raw.getvalue()), weights_only=False))
    for name in FIELDS:
        assert getattr(restored, name) == getattr(strat, name), name
    for name in TENSORS:
        assert torch.equal(getattr(restored, name), getattr(strat, name)), name
    if average == "cumulative":
        assert strat.gamma_count > 0
    state = gen.get_state()
    for r in (r, r + 1):
        a = _round(strat, r, gen)
        gen2 = torch.Generator()
        gen2.set_state(state)
        b = _round(restored, r, gen2)
        state = gen2.get_state()
        assert torch.equal(a, b)
    assert restored.branches == strat.branches and restored.avg_objective == strat.avg_objective


def test_a_state_without_the_optional_keys_starts_them_fresh():
    strat, gen = _strategy("cumulative"), torch.Generator().manual_seed(1)
    for r in range(4):
        _round(strat, r, gen)
    full = strat.state_dict()
    old = {k: v for k, v in full.items() if k not in (*FIELDS[1:], *TENSORS)}
    restored = _strategy("cumulative")
    restored.load_state_dict(old)
    assert restored.rounds_done == strat.rounds_done
    assert restored.avg_objective == 0.0 and restored.branches == []
    assert restored.gamma_updates == 0 and restored.gamma_count == 0
    assert all(getattr(restored, name) is None for name in TENSORS)
