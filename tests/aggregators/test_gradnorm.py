"""GradNorm (Chen et al., arXiv 1711.02257, Algorithm 1) against a transcription with
torch.optim.Adam on the weights, and the direction of its restoring force."""

from __future__ import annotations

import pytest
import torch

from morl.aggregators import build
from tests.loss_weighting_helpers import close, loss_sequence


class _GradNormReference:
    """Algorithm 1 of Chen et al.: L_grad = Σ|‖w_k g_k‖ − Ḡ r_k^α| (target constant), Adam on w,
    then w ≥ 0 and Σ w = K (the clip is morl's choice, documented in gradnorm.py)."""

    def __init__(self, k, alpha, lr):
        self.w = torch.ones(k, dtype=torch.float64, requires_grad=True)
        self.opt = torch.optim.Adam([self.w], lr=lr)
        self.alpha, self.initial, self.k = alpha, None, k
        self.totals, self.clipped = [], 0  # Σ w after the clip, before renormalising; weights set to 0

    def step(self, grads, losses):
        if self.initial is None:
            self.initial = losses.clone()
        direction = self.w.detach() @ grads
        g = torch.linalg.vector_norm(self.w.unsqueeze(1) * grads, dim=1)
        # a task that starts at loss 0 has no relative progress to measure: L̃ = 1 (morl's choice)
        tilde = torch.where(self.initial == 0, torch.ones_like(losses), losses / self.initial)
        target = (g.mean() * (tilde / tilde.mean()) ** self.alpha).detach()
        self.opt.zero_grad()
        # ∂L_grad/∂w_k = sign(G_k − target_k)‖g_k‖ for w_k ≥ 0, by hand: autograd's subgradient
        # of ‖w_k g_k‖ at a clipped w_k = 0 is 0, which would freeze a task's weight at 0
        self.w.grad = torch.sign(g - target).detach() * torch.linalg.vector_norm(grads, dim=1)
        self.opt.step()
        with torch.no_grad():
            self.w.clamp_(min=0.0)
            self.totals.append(float(self.w.sum()))
            self.clipped += int((self.w == 0).sum())
            self.w.mul_(self.k / self.w.sum())
        return direction


@pytest.mark.parametrize("seed", range(3))
def test_gradnorm_matches_algorithm_1(seed):
    gen = torch.Generator().manual_seed(seed)
    k, d = 2 + seed, 7
    ref, agg = _GradNormReference(k, 1.5, 0.025), build("gradnorm")
    for losses in loss_sequence(gen, k, 12):
        grads = torch.randn(k, d, generator=gen, dtype=torch.float64) * torch.rand(
            k, 1, generator=gen, dtype=torch.float64
        )
        close(agg(grads, losses), ref.step(grads, losses))
    close(agg.w, ref.w.detach())


@pytest.mark.parametrize("seed", range(3))
def test_gradnorm_matches_algorithm_1_with_long_steps_and_tasks_starting_at_zero(seed):
    """lr 0.6: Adam's steps are about as long as the weights, so the clip often sets weights
    to 0 (the reference's hand-written derivative then lets them grow back). Task 0 starts at
    loss 0 (L̃_0 = 1 by convention, as in the reference)."""
    gen = torch.Generator().manual_seed(100 + seed)
    k, d = 3 + seed % 3, 5
    ref, agg = _GradNormReference(k, 1.5, 0.6), build("gradnorm", lr=0.6)
    sequence = loss_sequence(gen, k, 3 * 12)
    sequence[0][0] = 0.0
    for losses in sequence:
        grads = torch.randn(k, d, generator=gen, dtype=torch.float64) * torch.rand(
            k, 1, generator=gen, dtype=torch.float64
        )
        close(agg(grads, losses), ref.step(grads, losses))
    close(agg.w, ref.w.detach())
    assert ref.clipped > 0  # the clip did act


def test_gradnorm_renormalises_whatever_the_clip_leaves_above_zero():
    """From a state with momentum pushing both weights down (Adam's m = 2, v = 1 after 10
    steps, lr 3.7: each weight moves down by about 1 whatever its current gradient's sign),
    w = [1.3, 0.7] becomes about [0.23, 0] after the clip, 0 < Σ w ≤ 1; Algorithm 1
    renormalises that to Σ w = K, as torch.optim.Adam from the same state, clipped and
    renormalised, says: [2, 0], not a reset to equal weights."""
    dt = torch.float64
    agg = build("gradnorm", lr=3.7)
    agg.w, agg.m, agg.v = torch.tensor([1.3, 0.7], dtype=dt), torch.full((2,), 2.0, dtype=dt), torch.ones(2, dtype=dt)
    agg.step, agg.initial, agg.started = torch.tensor(10.0, dtype=dt), torch.ones(2, dtype=dt), torch.tensor(True)
    ref = _GradNormReference(2, 1.5, 3.7)
    ref.initial = torch.ones(2, dtype=dt)
    with torch.no_grad():
        ref.w.copy_(agg.w)
    ref.opt.state[ref.w] = {"step": torch.tensor(10.0), "exp_avg": agg.m.clone(), "exp_avg_sq": agg.v.clone()}
    grads, losses = torch.eye(2, dtype=dt), torch.ones(2, dtype=dt)
    close(agg(grads, losses), ref.step(grads, losses))
    assert 0.0 < ref.totals[0] <= 1.0, ref.totals
    close(agg.w, ref.w.detach())
    close(agg.w, torch.tensor([2.0, 0.0], dtype=dt))


def test_gradnorm_moves_weight_to_the_slower_task_and_needs_the_matrix():
    agg = build("gradnorm", lr=0.1)
    grads = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    agg(grads, torch.tensor([1.0, 1.0], dtype=torch.float64))
    agg(grads, torch.tensor([0.5, 1.0], dtype=torch.float64))  # task 1 trains slower: r_1 > r_0
    assert agg.w[1] > 1.0 > agg.w[0]
    assert agg.needs_grads
    with pytest.raises(TypeError, match="gradient norms"):
        agg.weighted_loss(torch.ones(2))
