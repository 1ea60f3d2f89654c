"""MT-SAC where the mutation run (docs/testing.md) found the fast tests silent.

Config boundaries; the conflict statistics on a hand-computed 3×2 matrix; gradient clipping
(through Adam's first moment: after one step exp_avg = (1 − β1) g, so the clipped gradient is
visible although Adam's step itself is scale-free); the gradient guard's overflow rules;
Adam's step bound at its edges; the aggregated-critic path with a non-mean aggregator (hand
formula: orthogonal task blocks); state round trips with a critic aggregator and non-zero
counters; a refused temperature step counted as a skipped update.
"""

import io
import math
from types import SimpleNamespace

import pytest
import torch

import morl
from morl.agents.rl.mtsac import MTSAC, MTSACConfig, _adam_step_bound, _conflict_stats, _guard_and_clip
from test_mtsac import OBS, OBS_RAW, A, B, T, _agent, _batch, _cfg, _params


@pytest.mark.parametrize("kw", [dict(hidden_sizes=[1]), dict(batch_size=T), dict(buffer_capacity=T), dict(gamma=0.0),
                                dict(gamma=1.0), dict(tau=1.0), dict(grad_clip=0.5)])
def test_boundary_configs_are_valid(kw):
    _cfg(**kw).validate(T)


@pytest.mark.parametrize("kw", [dict(hidden_sizes=[0]), dict(hidden_sizes=[8, 0]), dict(gamma=1.5), dict(tau=1.5),
                                dict(grad_clip=0.0), dict(actor_update_freq=0), dict(target_update_freq=0),
                                dict(log_std_min=1.0, log_std_max=1.0), dict(actor_lr=0.0)])
def test_boundary_configs_are_refused(kw):
    with pytest.raises(ValueError):
        _cfg(**kw).validate(T)


def test_conflict_stats_hand_values():
    # g1 = (0.3, 0.4), g2 = (0, −0.2), g3 = (0.8, 0): norms 0.5, 0.2, 0.8 (products < 1);
    # cos(1,2) = −0.08/0.1 = −0.8, cos(1,3) = 0.24/0.4 = 0.6, cos(2,3) = 0 (orthogonal: not a conflict).
    grads = torch.tensor([[0.3, 0.4], [0.0, -0.2], [0.8, 0.0]], dtype=torch.float64)
    direction = torch.tensor([3.0, 4.0], dtype=torch.float64)
    s = _conflict_stats(grads, direction)
    torch.testing.assert_close(s["grad_norm_task"], torch.tensor([0.5, 0.2, 0.8], dtype=torch.float64))
    assert math.isclose(float(s["grad_norm_pre"]), math.sqrt(1.25) / 3, rel_tol=1e-12)  # ‖(1.1, 0.2)/3‖
    assert float(s["grad_norm_post"]) == 5.0
    assert math.isclose(float(s["grad_cos_min"]), -0.8, rel_tol=1e-12)
    assert math.isclose(float(s["grad_cos_mean"]), (-0.8 + 0.6 + 0.0) / 3, rel_tol=1e-12)
    assert int(s["grad_conflicts"]) == 1
    two = _conflict_stats(grads[:2], direction)
    assert math.isclose(float(two["grad_cos_min"]), -0.8, rel_tol=1e-12) and int(two["grad_conflicts"]) == 1
    one = _conflict_stats(grads[:1], direction)  # one task: no pairs, no cosine statistics
    assert set(one) == {"grad_norm_task", "grad_norm_pre", "grad_norm_post"}


def test_adam_step_bound_edges():
    # (1 − β1) / sqrt((1 − β2)(1 − β1²/β2)); no bound unless β1² < β2 < 1.
    bound = _adam_step_bound(SimpleNamespace(defaults={"betas": (0.9, 0.999)}))
    assert math.isclose(bound, 0.1 / math.sqrt(0.001 * (1 - 0.81 / 0.999)), rel_tol=1e-12) and 7.2 < bound < 7.3
    for betas in [(0.9, 0.81), (0.9, 1.0), (0.5, 1.5)]:
        assert _adam_step_bound(SimpleNamespace(defaults={"betas": betas})) == math.inf


def test_guard_and_clip_coefficient_and_overflow_rules():
    # below max_norm: untouched (coef = min(1, max/(‖g‖ + 1e-6)) = 1)
    g = [torch.tensor([0.3, 0.4])]
    ok, norm = _guard_and_clip(g, max_norm=2.0)
    assert bool(ok) and torch.equal(g[0], torch.tensor([0.3, 0.4]))
    # above: scaled by max/(‖g‖ + 1e-6) (the 1e-6 shows at ‖g‖ = 0.01: 1e-4 relative)
    g = [torch.tensor([0.006, 0.008], dtype=torch.float64)]
    _guard_and_clip(g, max_norm=0.001)
    torch.testing.assert_close(g[0], torch.tensor([0.006, 0.008], dtype=torch.float64) * (0.001 / (0.01 + 1e-6)),
                               rtol=1e-12, atol=0)
    # a huge but finite gradient is what clipping is for: accepted, clipped to max_norm
    g = [torch.full((4,), 4e18)]  # ‖g‖ = 8e18: finite (float32 norms of entries above ~1e19 overflow)
    ok, _ = _guard_and_clip(g, max_norm=1.0, zero_bad=False)
    assert bool(ok) and math.isclose(float(g[0].norm()), 1.0, rel_tol=1e-5)
    # (A finite norm whose square overflows, the case the post² check is for, needs a norm
    # accumulated in higher precision; torch's CPU norm overflows with the square: see
    # docs/testing.md, equivalent mutants.)


@pytest.mark.parametrize("aggregator", ["mean", "pcgrad"])
def test_grad_clip_reaches_every_optimizer(aggregator):
    # after the first Adam step exp_avg = (1 − β1)·g: with grad_clip = 1e-3 its norm over each
    # optimizer's parameters is 0.1·1e-3·‖g‖/(‖g‖ + 1e-6), i.e. 1e-4 when ‖g‖ ≫ 1e-6.
    agent = _agent(aggregator, grad_clip=1e-3)
    agent.update(_batch(0), 0)
    free = _agent(aggregator)
    free.update(_batch(0), 0)
    for opt, params, ref_opt, ref_params in [
        (agent.critic_opt, list(agent.critic.parameters()), free.critic_opt, list(free.critic.parameters())),
        (agent.actor_opt, list(agent.actor.parameters()), free.actor_opt, list(free.actor.parameters())),
        (agent.alpha_opt, [agent.log_alpha], free.alpha_opt, [free.log_alpha]),
    ]:
        m = torch.stack([opt.state[p]["exp_avg"].norm() for p in params]).norm()
        m_free = torch.stack([ref_opt.state[p]["exp_avg"].norm() for p in ref_params]).norm()
        assert float(m_free) > 1e-3  # unclipped: > 10x the clipped norm, so the clip acts
        assert math.isclose(float(m), 1e-4, rel_tol=1e-3)


def test_aggregated_critic_with_mgda_weights_tasks_by_inverse_squared_norm():
    # The critic rows are block diagonal (task t's gradient in critic t's block), i.e.
    # orthogonal: their min-norm point has λ_t = ‖g_t‖⁻² / Σ_s ‖g_s‖⁻², and the update writes
    # T·λ_t·g_t into critic t. Seen through exp_avg = 0.1·grad after the first step.
    agg, plain = _agent("mgda", aggregate_critic=True), _agent("mgda")
    agg.update(_batch(0), 0)
    plain.update(_batch(0), 0)
    g = [plain.critic_opt.state[p]["exp_avg"] / 0.1 for p in plain.critic.parameters()]
    sq = torch.stack([sum(x[t].double().pow(2).sum() for x in g) for t in range(T)])
    lam = (1 / sq) / (1 / sq).sum()
    assert float(lam.max() / lam.min()) > 1.2  # unequal weights: not the mean
    for p, x in zip(agg.critic.parameters(), g):
        got = agg.critic_opt.state[p]["exp_avg"] / 0.1
        for t in range(T):
            torch.testing.assert_close(got[t].double(), T * lam[t] * x[t].double(), rtol=2e-4, atol=1e-9)


def test_aggregate_none_ignores_the_aggregator():
    a, b = _agent("mgda", aggregate="none"), _agent("mean", aggregate="none")
    a.update(_batch(0), 0)
    b.update(_batch(0), 0)
    assert all(torch.equal(x, y) for x, y in zip(a.actor.parameters(), b.actor.parameters()))


def test_state_round_trip_with_critic_aggregator_and_counters():
    agent = _agent("moco", aggregate_critic=True)
    for step in range(3):
        agent.update(_batch(step), step)
    agent.nonfinite_updates.fill_(5)
    agent.nonfinite_streak.fill_(2)
    agent.nonfinite_longest.fill_(3)
    raw = io.BytesIO()
    torch.save(agent.state_dict(), raw)
    restored = _agent("moco", seed=123, aggregate_critic=True)
    restored.load_state_dict(torch.load(io.BytesIO(raw.getvalue()), weights_only=False))
    assert (int(restored.nonfinite_updates), int(restored.nonfinite_streak), int(restored.nonfinite_longest)) == (5, 2, 3)
    for key, value in agent.critic_aggregator.state_dict().items():
        if torch.is_tensor(value):
            assert torch.equal(value, restored.critic_aggregator.state_dict()[key]), key
    out_a, out_b = agent.update(_batch(9), 3), restored.update(_batch(9), 3)
    for key in out_a:
        assert torch.equal(out_a[key], out_b[key]), key
    assert all(torch.equal(x, y) for x, y in zip(agent.critic.parameters(), restored.critic.parameters()))
    # a checkpoint from before the streak counters loads with no streak known
    old = agent.state_dict()
    del old["nonfinite_streak"], old["nonfinite_longest"]
    restored.load_state_dict(old)
    assert int(restored.nonfinite_streak) == 0 and int(restored.nonfinite_longest) == 0
    # an agent without critic aggregation ignores the saved critic aggregator state
    plain = _agent("moco")
    plain.load_state_dict(agent.state_dict())
    assert plain.critic_aggregator is None


def test_a_refused_temperature_step_counts_as_a_skipped_update():
    # alpha_lr = 1e38: Adam's largest step (~7.27·lr) would overflow float32, so the guard refuses
    # the temperature step; critic and actor still step, and the update is counted as skipped.
    agent = _agent("mean", alpha_lr=1e38)
    actor, alpha = _params(agent.actor), agent.log_alpha.detach().clone()
    out = agent.update(_batch(0), 0)
    assert int(out["nonfinite_updates"]) == 1 and int(out["nonfinite_streak"]) == 1
    assert torch.equal(agent.log_alpha, alpha)
    assert not all(torch.equal(x, y) for x, y in zip(actor, _params(agent.actor)))


def test_defaults_wired_into_the_agent():
    agent = _agent("mean", log_std_max=0.5)
    assert agent.target_entropy == -A  # SAC's heuristic H̄ = −dim(A) (Haarnoja et al. 2018, arXiv:1812.05905, §5)
    assert agent.actor.log_std_max == 0.5
    assert not any(p.requires_grad for p in agent.critic_target.parameters())
    out = agent.update(_batch(0), 0)  # diagnostics default on: conflict statistics reported for mean
    assert {"grad_norm_task", "grad_cos_min", "nonfinite_streak"} <= set(out)


class _FirstTask(morl.Aggregator):
    """d = g_1 (weights e_1), and it keeps what it was given and the losses it saw."""

    def aggregate(self, grads, losses):
        self.seen, self.seen_losses = grads.detach().clone(), losses
        self.weights = torch.zeros(grads.shape[0], dtype=grads.dtype, device=grads.device)
        self.weights[0] = 1.0
        return grads[0]


@pytest.mark.parametrize("mode", ["actor", "actor_trunk"])
def test_the_aggregated_direction_is_what_reaches_the_actor(mode):
    # The aggregator's direction (here task 1's gradient) is written into .grad of exactly the
    # aggregated parameters (all, or the trunk); the others get the mean-loss gradient.
    agent = _agent(_FirstTask(check_finite="skip"), aggregate=mode, multi_head=True)
    agent.update(_batch(0), 0)
    seen = agent.aggregator.seen
    assert agent.aggregator.seen_losses is not None and agent.aggregator.seen_losses.shape == (T,)
    trunk = set(agent.actor.trunk_parameter_names())
    picked = [(n, p) for n, p in agent.actor.named_parameters() if mode == "actor" or n in trunk]
    assert seen.shape == (T, sum(p.numel() for _, p in picked))
    written = torch.cat([(agent.actor_opt.state[p]["exp_avg"] / 0.1).reshape(-1) for _, p in picked])
    torch.testing.assert_close(written, seen[0], rtol=1e-5, atol=1e-7)
    assert float((seen[0] - seen.mean(0)).norm()) > 0.1 * float(seen[0].norm())  # not the mean


def test_a_batch_with_the_wrong_task_count_is_refused():
    agent = _agent("mean")
    batch = {k: v[:2] for k, v in _batch(0).items()}
    with pytest.raises(ValueError, match="batch"):
        agent.update(batch, 0)


def _first_moments(opt, params):
    return [opt.state[p]["exp_avg"] / 0.1 for p in params]  # = the step's gradient after one Adam step


def test_a_loss_weighting_on_the_critics_scales_critic_t_by_T_w_t():
    # UW starts at w_t = 1/(2σ²) = 0.5: one backward of T·Σ w_t L_t gives critic t the gradient
    # T·w_t·∇L_t = 1.5·∇L_t (what the [T, D] path of the same weighting would give).
    agg, plain = _agent("uw", aggregate_critic=True), _agent("mean")
    agg.update(_batch(0), 0)
    plain.update(_batch(0), 0)
    w = agg.critic_aggregator.weights
    assert torch.allclose(w, torch.full((T,), 0.5))
    for got, ref in zip(_first_moments(agg.critic_opt, list(agg.critic.parameters())),
                        _first_moments(plain.critic_opt, list(plain.critic.parameters()))):
        for t in range(T):
            torch.testing.assert_close(got[t], T * w[t] * ref[t], rtol=1e-4, atol=1e-6 * float(ref.abs().max()))


@pytest.mark.parametrize("mode", ["actor", "actor_trunk"])
def test_a_loss_weighting_on_the_actor(mode):
    # UW (w_t = 0.5): the aggregated parameters get Σ_t w_t ∇L_t = 1.5 × the mean-loss gradient,
    # the others (heads, with actor_trunk) the mean-loss gradient; the reported weights are UW's.
    uw, mean = _agent("uw", aggregate=mode, multi_head=True), _agent("mean", aggregate=mode, multi_head=True)
    out = uw.update(_batch(0), 0)
    mean.update(_batch(0), 0)
    torch.testing.assert_close(out["agg_weights"], torch.full((T,), 0.5))
    trunk = set(uw.actor.trunk_parameter_names())
    names = [n for n, _ in uw.actor.named_parameters()]
    for n, got, ref in zip(names, _first_moments(uw.actor_opt, list(uw.actor.parameters())),
                           _first_moments(mean.actor_opt, list(mean.actor.parameters()))):
        factor = 1.5 if (mode == "actor" or n in trunk) else 1.0
        torch.testing.assert_close(got, factor * ref, rtol=1e-4, atol=1e-6 * float(ref.abs().max()))


def _live_tensors() -> int:
    import gc

    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


@pytest.mark.parametrize("aggregator", ["mean", "cagrad"])
def test_updates_keep_no_autograd_history_and_hold_a_constant_number_of_tensors(aggregator):
    # A 4-hour MT10 run was killed for 18 GB: the optimizers' max|θ| bound was computed with
    # grad enabled and carried from step to step, chaining three scalars per optimizer step into one
    # ever-growing autograd graph. Nothing the agent keeps between updates may have a history.
    agent, batch = _agent(aggregator), _batch()
    for i in range(5):
        agent.update(batch, i, diagnostics=False)
    before = _live_tensors()
    for i in range(5, 45):
        agent.update(batch, i, diagnostics=False)
    assert _live_tensors() == before  # measured: +360 before the fix (3 scalars per optimizer per update), 0 after
    for opt in (agent.actor_opt, agent.critic_opt, agent.alpha_opt):
        bound = getattr(opt, "param_bound", None)
        assert bound is not None and bound.grad_fn is None and not bound.requires_grad


@pytest.mark.parametrize("check_finite", ["raise", "skip"])
def test_the_agent_trains_its_own_copies_of_the_aggregator(check_finite):
    """The aggregator a user passes is a template: the critic (and temperature) aggregators are
    independent copies (MoCo's tracked y and λ are buffers), and so is the actor's when the
    template raises on non-finite input (the agent needs a non-raising one: no host sync); a
    non-raising template is used for the actor as it is."""
    template = morl.build("moco", check_finite=check_finite)
    agent = MTSAC(OBS, A, T, _cfg(aggregate_critic=True), template, "cpu", 0)
    for step in range(2):
        agent.update(_batch(step), step)
    actor, critic = agent.aggregator, agent.critic_aggregator
    assert (actor is template) == (check_finite == "skip") and critic is not actor
    if check_finite == "raise":
        assert template.y is None and template.lam is None  # never called
    assert actor.y.shape != critic.y.shape  # actor vs critic gradients: separate buffers
