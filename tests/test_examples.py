"""The worked examples of docs/architecture.md (docs/examples/) do what the document says: a new
aggregator and a new learner (the new kind of run is tests/runners/shell/test_commands.py's)."""

import copy
import sys
from pathlib import Path

import pytest
import torch

import morl
import morl.aggregators

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


@pytest.fixture
def examples(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import new_aggregator
    import new_learner

    yield new_aggregator, new_learner
    sys.modules.pop("new_aggregator", None)
    sys.modules.pop("new_learner", None)


@pytest.mark.parametrize("seed", range(5))
def test_unit_norm_mean_is_the_mean_of_unit_gradients_scaled_to_the_longest(examples, seed):
    gen = torch.Generator().manual_seed(seed)
    grads = torch.randn(4, 50, generator=gen, dtype=torch.float64) * torch.tensor(
        [[1e-3], [1.0], [7.0], [1e2]], dtype=torch.float64
    )
    norms = grads.norm(dim=1, keepdim=True)
    expected = norms.max() / 4 * (grads / norms).sum(0)  # written from the formula, not the code
    d = examples[0].UnitNormMean()(grads)
    torch.testing.assert_close(d, expected, rtol=1e-10, atol=0)
    torch.testing.assert_close(examples[0].UnitNormMean()(3.0 * grads), 3.0 * expected, rtol=1e-10, atol=0)


def test_unit_norm_mean_gives_a_zero_row_no_weight_and_inherits_the_non_finite_policy(examples):
    agg = examples[0].UnitNormMean(check_finite="skip")
    grads = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    torch.testing.assert_close(agg(grads), torch.tensor([1.5, 2.0]))  # (5 / 2) * (0.6, 0.8)
    assert agg.weights[1] == 0
    bad = torch.tensor([[1.0, float("nan")], [0.0, 1.0]])
    assert torch.equal(agg(bad), torch.zeros(2)) and int(agg.nonfinite_steps) == 1


def test_a_registered_example_aggregator_is_built_by_name_and_used_by_morl_backward(examples, monkeypatch):
    monkeypatch.setitem(morl.aggregators.REGISTRY, "unit_mean", "new_aggregator:UnitNormMean")
    agg = morl.build("unit_mean")
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    losses = torch.stack([(w * torch.tensor([2.0, 0.0])).sum(), (w * torch.tensor([0.0, 8.0])).sum()])
    morl.backward(losses, [w], agg)  # gradients (2, 0) and (0, 8): unit rows, scaled by 8 / 2
    torch.testing.assert_close(w.grad, torch.tensor([4.0, 4.0]))


def test_the_example_learner_takes_the_aggregated_step_on_the_trunk_and_each_task_s_on_its_head(examples):
    torch.manual_seed(0)
    learner = examples[1].MultiTaskRegressor(3, 5, 2, morl.build("mean"), lr=0.1)
    x, y = torch.randn(16, 3), torch.randn(16, 2)
    reference = copy.deepcopy(learner)
    losses = reference.losses(x, y)
    trunk_grads = torch.autograd.grad(
        losses.mean(), list(reference.trunk.parameters()), retain_graph=True
    )  # mean of K rows
    head_grads = torch.autograd.grad(losses.sum(), list(reference.heads.parameters()))
    learner.update(x, y)
    for p, p0, g in zip(learner.trunk.parameters(), reference.trunk.parameters(), trunk_grads):
        torch.testing.assert_close(p, p0 - 0.1 * g)
    for p, p0, g in zip(learner.heads.parameters(), reference.heads.parameters(), head_grads):
        torch.testing.assert_close(p, p0 - 0.1 * g)


@pytest.mark.parametrize(
    "seed", [0, pytest.param(1, marks=pytest.mark.integration), pytest.param(2, marks=pytest.mark.integration)]
)
def test_the_example_learner_learns_two_linear_tasks_with_mgda(examples, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(256, 4, generator=gen)
    y = x @ torch.randn(4, 2, generator=gen)
    torch.manual_seed(seed)
    learner = examples[1].MultiTaskRegressor(4, 32, 2, morl.build("mgda"), lr=0.05)
    first = learner.update(x, y)
    for _ in range(300):
        last = learner.update(x, y)
    # measured over seeds 0-9: each loss falls 77-176x; the bound 10x leaves a wide margin
    assert bool((last < first / 10).all()), (first, last)
