"""FAMO (Liu et al., arXiv 2306.03792, Algorithm 1) against the authors' famo.py
(get_weighted_loss / update, LibMTL's defaults) transcribed here, and hand values."""

from __future__ import annotations

import pytest
import torch

from morl.aggregators import build
from tests.loss_weighting_helpers import autograd_weights, close, loss_sequence


class _FAMOReference:
    """The authors' famo.py (get_weighted_loss / update) with LibMTL's defaults."""

    def __init__(self, k, w_lr=0.025, gamma=0.001):
        self.min_losses = torch.zeros(k, dtype=torch.float64)
        self.w = torch.zeros(k, dtype=torch.float64, requires_grad=True)
        self.w_opt = torch.optim.Adam([self.w], lr=w_lr, weight_decay=gamma)

    def weights(self, losses):
        self.prev_loss = losses

        def objective(leaf):
            z = torch.softmax(self.w, -1).detach()
            d = leaf - self.min_losses + 1e-8
            c = (z / d).sum().detach()
            return (d.log() * z / c).sum()

        return autograd_weights(objective, losses)

    def update(self, curr_loss):
        delta = (self.prev_loss - self.min_losses + 1e-8).log() - (curr_loss - self.min_losses + 1e-8).log()
        d = torch.autograd.grad(torch.softmax(self.w, -1), self.w, grad_outputs=delta.detach())[0]
        self.w_opt.zero_grad()
        self.w.grad = d
        self.w_opt.step()


@pytest.mark.parametrize("seed", range(3))
def test_famo_with_update_matches_algorithm_1(seed):
    gen = torch.Generator().manual_seed(seed)
    k = 2 + seed
    ref, agg = _FAMOReference(k), build("famo")
    for before, after in zip(loss_sequence(gen, k, 12), loss_sequence(gen, k, 12)):
        close(agg.loss_weights(before), ref.weights(before))
        agg.update(after)
        ref.update(after)
        close(agg.logits, ref.w.detach())


@pytest.mark.parametrize("seed", range(3))
def test_famo_without_update_uses_the_next_calls_losses(seed):
    gen = torch.Generator().manual_seed(seed)
    k = 3 + seed
    ref, agg = _FAMOReference(k), build("famo")
    batches = loss_sequence(gen, k, 12)
    for i, losses in enumerate(batches):
        if i:
            ref.update(losses)  # the approximation: "after" = this call's (new batch) losses
        close(agg.loss_weights(losses), ref.weights(losses))
    close(agg.logits, ref.w.detach())


def test_famo_hand_values_and_direction_of_the_logit_step():
    agg = build("famo")
    # z uniform: w_k = (1/L_k) / Σ 1/L_j
    close(agg.loss_weights(torch.tensor([1.0, 3.0], dtype=torch.float64)), [0.75, 0.25], tol=1e-7)  # D = L + 1e-8
    # task 0's log-loss falls by log 2, task 1's not at all: task 0 loses weight
    agg.update(torch.tensor([0.5, 3.0], dtype=torch.float64))
    assert agg.logits[0] < 0 < agg.logits[1]
    with pytest.raises(ValueError, match="must follow a call"):
        build("famo").update(torch.ones(2))
    assert build("famo").needs_losses_after_step  # learners call update() after their step


def test_famo_skips_the_logit_step_when_the_losses_after_the_step_are_not_finite():
    """A step that blew up (NaN/inf after) leaves ξ and Adam's state as they were; the next
    finite update steps from there."""
    agg = build("famo")
    agg.loss_weights(torch.tensor([1.0, 3.0], dtype=torch.float64))
    agg.update(torch.tensor([float("nan"), 3.0], dtype=torch.float64))
    assert torch.equal(agg.logits, torch.zeros(2, dtype=torch.float64)) and float(agg.step) == 0.0
    agg.loss_weights(torch.tensor([1.0, 3.0], dtype=torch.float64))
    agg.update(torch.tensor([0.5, 3.0], dtype=torch.float64))
    assert agg.logits[0] < 0 < agg.logits[1] and float(agg.step) == 1.0


@pytest.mark.parametrize("seed", range(3))
def test_famo_per_task_min_losses_match_set_min_losses(seed):
    gen = torch.Generator().manual_seed(seed)
    k = 3
    low = [0.1, 0.05 * seed, 0.15]
    ref, agg = _FAMOReference(k), build("famo", min_losses=low)
    ref.min_losses = torch.tensor(low, dtype=torch.float64)  # the authors' set_min_losses
    for before, after in zip(loss_sequence(gen, k, 12), loss_sequence(gen, k, 12)):
        close(agg.loss_weights(before), ref.weights(before))
        agg.update(after)
        ref.update(after)
    close(agg.logits, ref.w.detach())
    with pytest.raises(ValueError, match="min_losses has 3 entries for K=2"):
        build("famo", min_losses=low).loss_weights(torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="min_losses"):
        build("famo", min_losses=[0.0, float("nan")])
