"""Loss weightings (UW, DWA, FAMO, GLS, STCH) and GradNorm against transcriptions of the
authors' algorithms written here, over several steps and seeds, plus hand-computed values.

Each reference is the authors' objective differentiated by autograd (the weights are
∂(scalarised loss)/∂L_k) and their optimizer as ``torch.optim.Adam``; morl computes the
weights in closed form and steps with its functional Adam in buffers. Float64 throughout;
measured worst relative error over the seeds (6 seeds x 12 steps): FAMO logits 3.6e-15,
every other method <= 1.1e-15 (round-off); bound 1e-12 (STCH "nadir" 1e-10: the authors'
+1e-20 inside the log).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from morl.aggregators import build

SEEDS = range(6)
STEPS = 12
TOL = 1e-12


def _losses(gen, k, steps, low=0.2, high=3.0):
    return [torch.rand(k, generator=gen, dtype=torch.float64) * (high - low) + low for _ in range(steps)]


def _close(a, b, tol=TOL):
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    assert torch.allclose(a, b, rtol=tol, atol=tol * float(b.abs().max())), (a, b)


def _autograd_weights(objective, losses):
    leaf = losses.clone().requires_grad_(True)
    (w,) = torch.autograd.grad(objective(leaf), leaf)
    return w


# -- UW -----------------------------------------------------------------------------------------
class _UWReference:
    """The FAMO authors' MT10 UW baseline: 0.5 (exp(-s) L + s) summed, own Adam on s."""

    def __init__(self, k, lr, init):
        self.s = torch.full((k,), init, dtype=torch.float64, requires_grad=True)
        self.opt = torch.optim.Adam([self.s], lr=lr)

    def step(self, losses):
        leaf = losses.clone().requires_grad_(True)
        self.opt.zero_grad()
        (0.5 * (torch.exp(-self.s) * leaf + self.s)).sum().backward()
        self.opt.step()
        return leaf.grad


@pytest.mark.parametrize("seed", SEEDS)
def test_uw_matches_the_reference_over_steps(seed):
    gen = torch.Generator().manual_seed(seed)
    k = 2 + seed
    ref, agg = _UWReference(k, 0.025, -0.5), build("uw", init_log_var=-0.5)
    for losses in _losses(gen, k, STEPS):
        _close(agg.loss_weights(losses), ref.step(losses))
    _close(agg.log_var, ref.s.detach())


def test_uw_hand_values():
    agg = build("uw", lr=0.1)
    _close(agg.loss_weights(torch.tensor([4.0, 0.5], dtype=torch.float64)), [0.5, 0.5])
    # ∂/∂s = 0.5 - 0.5 L: Adam's first step is -lr·sign: s = (+0.1, -0.1)
    _close(agg.log_var, [0.1, -0.1], tol=1e-7)
    _close(agg.loss_weights(torch.ones(2, dtype=torch.float64)), [0.5 * math.exp(-0.1), 0.5 * math.exp(0.1)], tol=1e-7)


# -- DWA ----------------------------------------------------------------------------------------
def _dwa_reference(batches, per_epoch, temperature=2.0):
    """LibMTL/mtan: epoch averages in a buffer; epoch e > 1 uses K softmax(buf[e-1]/buf[e-2] / T)."""
    k = batches[0].shape[0]
    buffer, out = [], []
    for start in range(0, len(batches), per_epoch):
        epoch = len(buffer)
        chunk = [b.numpy() for b in batches[start:start + per_epoch]]
        for _ in chunk:
            if epoch > 1:
                r = buffer[epoch - 1] / buffer[epoch - 2] / temperature
                out.append(k * np.exp(r) / np.exp(r).sum())
            else:
                out.append(np.ones(k))
        buffer.append(np.mean(chunk, axis=0))
    return out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("every", [1, 3])
def test_dwa_matches_the_epoch_rule(seed, every):
    gen = torch.Generator().manual_seed(seed)
    batches = _losses(gen, 3 + seed % 3, 5 * every)
    agg = build("dwa", every=every)
    got = [agg.loss_weights(b) for b in batches]
    for g, r in zip(got, _dwa_reference(batches, every)):
        _close(g, r)


def test_dwa_end_period_hook_equals_every():
    gen = torch.Generator().manual_seed(7)
    batches = _losses(gen, 4, 12)
    by_count, by_hook = build("dwa", every=4), build("dwa", every=0)
    for i, b in enumerate(batches):
        _close(by_hook.loss_weights(b), by_count.loss_weights(b))
        if i % 4 == 3:
            by_hook.end_period()


def test_dwa_hand_values():
    agg = build("dwa")
    for losses in ([1.0, 1.0], [2.0, 1.0]):
        _close(agg.loss_weights(torch.tensor(losses, dtype=torch.float64)), [1.0, 1.0])
    e = math.exp(0.5)  # r = (2, 1), r/T = (1, 0.5)
    _close(agg.loss_weights(torch.ones(2, dtype=torch.float64)), [2 * e / (e + 1), 2 / (e + 1)])


def test_dwa_periods_of_different_lengths_use_their_means_and_an_empty_period_is_ignored():
    """``every=0`` with :meth:`end_period` after 2 calls, then after 3: L(t−2) and L(t−1) are
    each period's MEAN loss (the paper's epoch average), not its sum; closing a period with no
    call in it changes nothing. Period 1: (1, 2) twice, mean (1, 2); period 2: (3, 2), (3, 2),
    (3, 2), mean (3, 2): r = (3, 1), w = 2 softmax(r / 2)."""
    agg = build("dwa", every=0)
    for losses, calls in (([1.0, 2.0], 2), ([3.0, 2.0], 3)):
        for _ in range(calls):
            agg.loss_weights(torch.tensor(losses, dtype=torch.float64))
        agg.end_period()
        agg.end_period()  # empty: ignored
    e = math.exp(1.0)  # r/T = (1.5, 0.5): softmax = (e, 1) / (e + 1)
    _close(agg.loss_weights(torch.ones(2, dtype=torch.float64)), [2 * e / (e + 1), 2 / (e + 1)])


# -- FAMO ---------------------------------------------------------------------------------------
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

        return _autograd_weights(objective, losses)

    def update(self, curr_loss):
        delta = (self.prev_loss - self.min_losses + 1e-8).log() - (curr_loss - self.min_losses + 1e-8).log()
        d = torch.autograd.grad(torch.softmax(self.w, -1), self.w, grad_outputs=delta.detach())[0]
        self.w_opt.zero_grad()
        self.w.grad = d
        self.w_opt.step()


@pytest.mark.parametrize("seed", SEEDS)
def test_famo_with_update_matches_algorithm_1(seed):
    gen = torch.Generator().manual_seed(seed)
    k = 2 + seed
    ref, agg = _FAMOReference(k), build("famo")
    for before, after in zip(_losses(gen, k, STEPS), _losses(gen, k, STEPS)):
        _close(agg.loss_weights(before), ref.weights(before))
        agg.update(after)
        ref.update(after)
        _close(agg.logits, ref.w.detach())


@pytest.mark.parametrize("seed", SEEDS)
def test_famo_without_update_uses_the_next_calls_losses(seed):
    gen = torch.Generator().manual_seed(seed)
    k = 3 + seed
    ref, agg = _FAMOReference(k), build("famo")
    batches = _losses(gen, k, STEPS)
    for i, losses in enumerate(batches):
        if i:
            ref.update(losses)  # the approximation: "after" = this call's (new batch) losses
        _close(agg.loss_weights(losses), ref.weights(losses))
    _close(agg.logits, ref.w.detach())


def test_famo_hand_values_and_direction_of_the_logit_step():
    agg = build("famo")
    # z uniform: w_k = (1/L_k) / Σ 1/L_j
    _close(agg.loss_weights(torch.tensor([1.0, 3.0], dtype=torch.float64)), [0.75, 0.25], tol=1e-7)  # D = L + 1e-8
    # task 0's log-loss falls by log 2, task 1's not at all: task 0 loses weight
    agg.update(torch.tensor([0.5, 3.0], dtype=torch.float64))
    assert agg.logits[0] < 0 < agg.logits[1]
    with pytest.raises(ValueError, match="must follow a call"):
        build("famo").update(torch.ones(2))


# -- GLS ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_gls_is_the_gradient_of_the_geometric_mean(seed):
    gen = torch.Generator().manual_seed(seed)
    k = 2 + 2 * seed
    agg = build("gls")
    for losses in _losses(gen, k, 4, low=0.01, high=20.0):
        _close(agg.loss_weights(losses), _autograd_weights(lambda x: x.prod() ** (1.0 / k), losses))


def test_gls_hand_values_and_no_underflow():
    _close(build("gls").loss_weights(torch.tensor([1.0, 4.0], dtype=torch.float64)), [1.0, 0.25])
    small = torch.full((200,), 1e-3, dtype=torch.float64)  # Π L = 1e-600 underflows; the weights do not
    _close(build("gls").loss_weights(small), torch.full((200,), 1.0 / 200, dtype=torch.float64))


# -- STCH ---------------------------------------------------------------------------------------
class _STCHReference:
    """The authors' STCH_MTL weighting with epochs replaced by calls (see morl/aggregators/stch.py)."""

    def __init__(self, k, mu, warmup):
        self.k, self.mu, self.warmup = k, mu, warmup
        self.step, self.total, self.count, self.nadir = 0, 0.0, 0, None

    def weights(self, losses):
        self.step += 1
        if self.step <= self.warmup or (self.warmup == 0 and self.step == 1):
            self.total, self.count = self.total + losses, self.count + 1
        if self.step <= self.warmup:
            return _autograd_weights(lambda x: torch.log(x + 1e-20).sum(), losses)
        if self.nadir is None:
            self.nadir = self.total / self.count

        def objective(x):
            f = torch.log(x / self.nadir + 1e-20)
            return self.mu * torch.log(torch.exp((f - f.max().detach()) / self.mu).sum()) * self.k

        return _autograd_weights(objective, losses)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("warmup", [0, 3])
def test_stch_nadir_matches_the_authors_code(seed, warmup):
    gen = torch.Generator().manual_seed(seed)
    k, mu = 2 + seed, [1.0, 0.3, 2.0][seed % 3]
    ref, agg = _STCHReference(k, mu, warmup), build("stch", mu=mu, warmup=warmup)
    for losses in _losses(gen, k, STEPS):
        _close(agg.loss_weights(losses), ref.weights(losses), tol=1e-10)  # +1e-20 inside the log: 1e-20/L relative


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ideal", ["min", "zero"])
def test_stch_min_and_zero_ideal_points(seed, ideal):
    gen = torch.Generator().manual_seed(seed)
    k, mu = 3 + seed, 0.5
    agg = build("stch", mu=mu, ideal=ideal)
    low = torch.full((k,), math.inf, dtype=torch.float64)
    for losses in _losses(gen, k, STEPS):
        low = torch.minimum(low, losses)
        z = low if ideal == "min" else torch.zeros(k, dtype=torch.float64)
        ref = _autograd_weights(lambda x: mu * torch.logsumexp((x - z) / mu, 0), losses)
        _close(agg.loss_weights(losses), ref)


def test_stch_hand_values():
    third = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64)
    _close(build("stch", ideal="zero").loss_weights(third), [0.25, 0.75])
    agg = build("stch")  # nadir = first losses: weights 1/L, then K softmax(log(L/n)/μ)/L
    _close(agg.loss_weights(torch.tensor([1.0, 2.0], dtype=torch.float64)), [1.0, 0.5])
    _close(agg.loss_weights(torch.tensor([2.0, 2.0], dtype=torch.float64)), [2 * (2 / 3) / 2, 2 * (1 / 3) / 2])


def test_stch_keeps_the_warm_up_mean_as_its_nadir():
    """The state ``nadir`` (checkpointed, logged) is the mean loss of the warm-up calls, fixed
    once the warm-up ends."""
    agg = build("stch", warmup=2)
    for losses in ([1.0, 4.0], [3.0, 2.0], [9.0, 9.0]):
        agg.loss_weights(torch.tensor(losses, dtype=torch.float64))
    _close(agg.nadir, [2.0, 3.0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gls_floors_non_positive_losses_at_eps_times_the_largest(dtype):
    """A zero or negative loss (an RL actor loss, say) counts as ε·max_k |L_k| (ε of the dtype),
    so its weight is large but finite: losses (−5, 0, 1000) are read as (f, f, 1000) with
    f = 1000 ε, and w_k = (f · f · 1000)^(1/3) / (3 L_k)."""
    f = 1000.0 * torch.finfo(dtype).eps
    expected = torch.tensor([f, f, 1000.0], dtype=torch.float64)
    expected = (f * f * 1000.0) ** (1.0 / 3.0) / (3.0 * expected)
    got = build("gls").loss_weights(torch.tensor([-5.0, 0.0, 1000.0], dtype=dtype))
    _close(got, expected, tol=1e-5 if dtype == torch.float32 else 1e-12)


def test_weighted_loss_takes_one_loss_and_refuses_other_shapes():
    agg = build("gls")
    loss = agg.weighted_loss(torch.tensor([2.5], dtype=torch.float64))
    _close(loss, 2.5)  # K = 1: w = 1
    for bad in ([1.0, 2.0], torch.ones(2, 2), torch.ones(0)):
        with pytest.raises(ValueError, match=r"^losses must be a \[K\] tensor with K >= 1"):
            agg.weighted_loss(bad)


# -- GradNorm -----------------------------------------------------------------------------------
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


@pytest.mark.parametrize("seed", SEEDS)
def test_gradnorm_matches_algorithm_1(seed):
    gen = torch.Generator().manual_seed(seed)
    k, d = 2 + seed, 7
    ref, agg = _GradNormReference(k, 1.5, 0.025), build("gradnorm")
    for losses in _losses(gen, k, STEPS):
        grads = torch.randn(k, d, generator=gen, dtype=torch.float64) * torch.rand(k, 1, generator=gen, dtype=torch.float64)
        _close(agg(grads, losses), ref.step(grads, losses))
    _close(agg.w, ref.w.detach())


@pytest.mark.parametrize("seed", SEEDS)
def test_gradnorm_matches_algorithm_1_with_long_steps_and_tasks_starting_at_zero(seed):
    """lr 0.6: Adam's steps are about as long as the weights, so the clip often sets weights
    to 0 (the reference's hand-written derivative then lets them grow back). Task 0 starts at
    loss 0 (L̃_0 = 1 by convention, as in the reference)."""
    gen = torch.Generator().manual_seed(100 + seed)
    k, d = 3 + seed % 3, 5
    ref, agg = _GradNormReference(k, 1.5, 0.6), build("gradnorm", lr=0.6)
    sequence = _losses(gen, k, 3 * STEPS)
    sequence[0][0] = 0.0
    for losses in sequence:
        grads = torch.randn(k, d, generator=gen, dtype=torch.float64) * torch.rand(k, 1, generator=gen, dtype=torch.float64)
        _close(agg(grads, losses), ref.step(grads, losses))
    _close(agg.w, ref.w.detach())
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
    _close(agg(grads, losses), ref.step(grads, losses))
    assert 0.0 < ref.totals[0] <= 1.0, ref.totals
    _close(agg.w, ref.w.detach())
    _close(agg.w, torch.tensor([2.0, 0.0], dtype=dt))


def test_gradnorm_moves_weight_to_the_slower_task_and_needs_the_matrix():
    agg = build("gradnorm", lr=0.1)
    grads = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    agg(grads, torch.tensor([1.0, 1.0], dtype=torch.float64))
    agg(grads, torch.tensor([0.5, 1.0], dtype=torch.float64))  # task 1 trains slower: r_1 > r_0
    assert agg.w[1] > 1.0 > agg.w[0]
    assert agg.needs_grads
    with pytest.raises(TypeError, match="gradient norms"):
        agg.weighted_loss(torch.ones(2))


# -- the one-backward path ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["uw", "dwa", "famo", "gls", "stch"])
def test_weighted_loss_backward_equals_the_matrix_path(name):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    target = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    by_matrix, by_loss = build(name), build(name)
    for step in range(6):
        theta = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
        losses = ((x @ theta - target) ** 2).mean(0)
        jac = torch.stack([torch.autograd.grad(losses[i], theta, retain_graph=True)[0].reshape(-1) for i in range(3)])
        d = by_matrix(jac, losses.detach())
        (grad,) = torch.autograd.grad(by_loss.weighted_loss(losses), theta)
        _close(grad.reshape(-1), d, tol=1e-13)
        _close(by_loss.weights, by_matrix.weights, tol=0)
    assert not by_loss.needs_grads


@pytest.mark.parametrize("name", ["uw", "dwa", "famo", "gls", "stch"])
def test_weighted_loss_non_finite_policies(name):
    agg = build(name)
    with pytest.raises(ValueError, match="objective 1"):
        agg.weighted_loss(torch.tensor([1.0, float("nan"), 2.0]))
    skip = build(name, check_finite="skip")
    skip.weighted_loss(torch.tensor([1.0, 2.0, 3.0]))
    before = {k: v.clone() for k, v in skip.state_dict().items() if isinstance(v, torch.Tensor)}
    out = skip.weighted_loss(torch.tensor([1.0, float("inf"), 2.0]))
    assert torch.equal(skip.weights, torch.zeros(3)) and int(skip.stats["nonfinite_steps"]) == 1
    assert not torch.isfinite(out)  # 0·inf: the learner's guarded step refuses it
    after = skip.state_dict()
    for key, value in before.items():
        if key.split(".")[-1] != "nonfinite_steps":
            assert torch.equal(after[key], value), key
    meta = build(name, check_finite="skip").weighted_loss(torch.empty(4, device="meta"))
    assert meta.device.type == "meta"


@pytest.mark.parametrize("seed", SEEDS[:5])
def test_famo_per_task_min_losses_match_set_min_losses(seed):
    gen = torch.Generator().manual_seed(seed)
    k = 3
    low = [0.1, 0.05 * seed, 0.15]
    ref, agg = _FAMOReference(k), build("famo", min_losses=low)
    ref.min_losses = torch.tensor(low, dtype=torch.float64)  # the authors' set_min_losses
    for before, after in zip(_losses(gen, k, STEPS), _losses(gen, k, STEPS)):
        _close(agg.loss_weights(before), ref.weights(before))
        agg.update(after)
        ref.update(after)
    _close(agg.logits, ref.w.detach())
    with pytest.raises(ValueError, match="min_losses has 3 entries for K=2"):
        build("famo", min_losses=low).loss_weights(torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="min_losses"):
        build("famo", min_losses=[0.0, float("nan")])
