"""Guarded Adam (agents/rl/guarded_adam.py): clipping, the non-finite guard, Adam's step bound,
and steps that are refused leaving parameters and optimizer state bitwise as they were."""

import math
from types import SimpleNamespace

import pytest
import torch

from morl.agents.rl.guarded_adam import adam_step_bound, guard_and_clip, guarded_step, make_adam


def test_guard_and_clip_clips_to_max_norm_and_zeroes_non_finite_gradients():
    grads = [torch.full((3,), 4.0), torch.full((2, 2), 3.0)]
    ok, norm = guard_and_clip(grads, max_norm=1.0)
    assert bool(ok) and torch.isclose(norm, torch.tensor((48.0 + 36.0) ** 0.5))
    assert torch.isclose(torch.stack([g.norm() for g in grads]).norm(), torch.tensor(1.0), atol=1e-5)
    bad = [torch.tensor([1.0, float("inf")])]
    ok, _ = guard_and_clip(bad, max_norm=None)
    assert not bool(ok) and torch.equal(bad[0], torch.zeros(2))


def test_guard_and_clip_coefficient_and_overflow_rules():
    # below max_norm: untouched (coef = min(1, max/(‖g‖ + 1e-6)) = 1)
    g = [torch.tensor([0.3, 0.4])]
    ok, _ = guard_and_clip(g, max_norm=2.0)
    assert bool(ok) and torch.equal(g[0], torch.tensor([0.3, 0.4]))
    # above: scaled by max/(‖g‖ + 1e-6) (the 1e-6 shows at ‖g‖ = 0.01: 1e-4 relative)
    g = [torch.tensor([0.006, 0.008], dtype=torch.float64)]
    guard_and_clip(g, max_norm=0.001)
    torch.testing.assert_close(
        g[0], torch.tensor([0.006, 0.008], dtype=torch.float64) * (0.001 / (0.01 + 1e-6)), rtol=1e-12, atol=0
    )
    # a huge but finite gradient is what clipping is for: accepted, clipped to max_norm
    g = [torch.full((4,), 4e18)]  # ‖g‖ = 8e18: finite (float32 norms of entries above ~1e19 overflow)
    ok, _ = guard_and_clip(g, max_norm=1.0, zero_bad=False)
    assert bool(ok) and math.isclose(float(g[0].norm()), 1.0, rel_tol=1e-5)


def test_adam_step_bound_formula_and_edges():
    # (1 − β1) / sqrt((1 − β2)(1 − β1²/β2)); no bound unless β1² < β2 < 1.
    bound = adam_step_bound(SimpleNamespace(defaults={"betas": (0.9, 0.999)}))
    assert math.isclose(bound, 0.1 / math.sqrt(0.001 * (1 - 0.81 / 0.999)), rel_tol=1e-12) and 7.2 < bound < 7.3
    for betas in [(0.9, 0.81), (0.9, 1.0), (0.5, 1.5)]:
        assert adam_step_bound(SimpleNamespace(defaults={"betas": betas})) == math.inf


@pytest.mark.parametrize("betas, steps, tight", [((0.9, 0.999), 400, False), ((0.5, 0.9), 120, True)])
def test_adam_step_bound_holds_for_the_worst_gradient_sequence(betas, steps, tight):
    # Cauchy-Schwarz is tight for g_i proportional to (beta2/beta1)^i: run torch's own Adam (float64)
    # on that sequence (coordinate 0) and on random ones; |dtheta| / lr never exceeds the bound.
    # With betas (0.5, 0.9) the bias corrections have faded by step 120 (0.9^120 = 3e-6), so the
    # worst sequence reaches the bound to 0.1% (it is the least upper bound, not a loose one).
    b1, b2 = betas
    p = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([p], lr=1.0, betas=betas, eps=0.0)
    bound = adam_step_bound(opt)
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for i in range(steps):
        noise = torch.randn(2, generator=gen, dtype=torch.float64)
        p.grad = torch.cat(
            [torch.tensor([(b2 / b1) ** i], dtype=torch.float64), noise * torch.tensor([1.0, 1e3]) ** (i % 2)]
        )
        before = p.detach().clone()
        opt.step()
        worst = max(worst, float((p.detach() - before).abs().max()))
    assert worst <= bound * (1 + 1e-12)
    if tight:
        assert worst > bound * 0.999


@pytest.mark.parametrize("fused", [True, False])
def test_a_skipped_adam_step_leaves_parameters_and_state_bitwise(fused):
    # fused: the kernel's found_inf; foreach: step_or_restore puts everything back
    p = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
    opt = torch.optim.Adam([p], lr=1e-3, fused=fused, foreach=None if fused else True)
    p.grad = torch.tensor([1.0, -2.0, 0.5])
    assert bool(guarded_step(opt, [p], None))
    before = (p.detach().clone(), {k: v.clone() for k, v in opt.state[p].items()})
    for grad, lr in (
        (torch.tensor([1.0, float("nan"), 0.0]), 1e-3),  # non-finite gradient
        (torch.tensor([2e19, 0.0, 0.0]), 1e-3),  # finite, but g^2 overflows Adam's v
        (torch.tensor([1.0, 1.0, 1.0]), 1e38),
    ):  # 2 * lr * bound overflows float32
        opt.param_groups[0]["lr"] = lr
        p.grad = grad
        assert not bool(guarded_step(opt, [p], None))
        assert torch.equal(p.detach(), before[0])
        assert all(torch.equal(opt.state[p][k], v) for k, v in before[1].items())
    opt.param_groups[0]["lr"] = 1e-3
    p.grad = torch.tensor([1.0, 1.0, 1.0])
    assert not bool(guarded_step(opt, [p], None, ok=torch.tensor(False)))  # the caller's veto
    assert torch.equal(p.detach(), before[0])


def test_a_huge_learning_rate_never_overflows_a_parameter():
    # lr = 1e36 with a constant gradient: each Adam step moves the weight by exactly lr (m/sqrt(v) = 1),
    # so plain Adam overflows float32 (3.4e38) after ~340 steps. The guard takes steps only while
    # max|θ| + 2 lr bound stays finite: about fmax / (2 lr 7.27) = 23 steps, then skips them all.
    plain = torch.nn.Parameter(torch.zeros(2))
    guarded = torch.nn.Parameter(torch.zeros(2))
    opt_plain, opt_guarded = make_adam([plain], 1e36), make_adam([guarded], 1e36)
    taken = 0
    for _ in range(400):
        plain.grad, guarded.grad = torch.ones(2), torch.ones(2)
        opt_plain.step()
        taken += int(guarded_step(opt_guarded, [guarded], None))
    assert not torch.isfinite(plain).all()
    assert torch.isfinite(guarded).all() and 20 <= taken <= 23
    assert torch.allclose(
        guarded.detach(), torch.full((2,), -1e36 * taken), rtol=1e-5
    )  # every taken step moved it by lr
