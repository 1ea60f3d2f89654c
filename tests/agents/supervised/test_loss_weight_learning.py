"""Loss-weight learning by FORUM (morl/agents/supervised/loss_weight_learning.py): the lower-level
objective is Σ softmax(α)_i L_i by hand, the upper level the per-task losses, the learned weights
travel with the adapter's state; FORUM's own step is tested in tests/bilevel."""

import pytest
import torch

from morl.agents.supervised.loss_weight_learning import LossWeightLearner
from morl.agents.supervised.multitask import MultiTaskLoss, SupervisedMTL
from morl.aggregators import build
from tests.agents.supervised.test_multitask import SPECS, batch, model


def _learner(seed=0, **kw):
    net = model(seed)
    adapter = SupervisedMTL(net, build("mean"), torch.optim.SGD(net.parameters(), lr=0.1), shared="trunk",
                            loss_fn=MultiTaskLoss(SPECS))  # fmt: skip
    return LossWeightLearner(adapter, len(SPECS), **kw)


def test_the_levels_are_the_weighted_sum_and_the_task_losses():
    learner, b = _learner(), batch()
    with torch.no_grad():
        learner.logits.copy_(torch.tensor([0.5, -1.0, 2.0]))
    losses = MultiTaskLoss(SPECS)(learner.adapter.model(b[0]), b[1])
    weights = torch.exp(torch.tensor([0.5, -1.0, 2.0])) / torch.exp(torch.tensor([0.5, -1.0, 2.0])).sum()
    torch.testing.assert_close(learner._upper(b), losses)
    torch.testing.assert_close(learner._lower(b), (weights.double() * losses).sum())
    torch.testing.assert_close(learner.weights(), weights)


def test_a_step_moves_the_weights_and_the_state_carries_them():
    learner = _learner()
    assert torch.equal(learner.weights(), torch.full((3,), 1 / 3))  # α = 0 at the start
    out = learner.step(batch(seed=1), batch(seed=2))
    assert not torch.equal(out["weights"], torch.full((3,), 1 / 3)) and learner.adapter.steps == 1
    state = learner.state_dict()
    held = learner.adapter.task_weights
    torch.testing.assert_close(held, (3 * learner.weights()).to(held.dtype))  # m · softmax(α)
    other = _learner(seed=4)
    other.load_state_dict(state)
    assert torch.equal(other.logits, learner.logits)
    assert all(torch.equal(a, b) for a, b in zip(other.adapter.model.parameters(), learner.adapter.model.parameters()))


def test_bad_options_are_one_line():
    with pytest.raises(ValueError, match="upper_split='test' is not valid; allowed: val, train"):
        _learner(upper_split="test")
