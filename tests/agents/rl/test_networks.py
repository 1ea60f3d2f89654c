"""The actor and critic networks (agents/rl/networks.py): the tanh-Gaussian log-probability
against torch.distributions, mtrl's log-probability clamp, and the two initialisations."""

import math

import pytest
import torch
from torch.distributions import Normal, TanhTransform, TransformedDistribution

from morl.agents.rl.networks import TaskActor, TwinCriticEnsemble, squashed_sample

T, OBS, A = 3, 8, 2


def test_tanh_gaussian_log_prob_matches_torch_distributions():
    # ε spread so that u reaches ±12 (1 − tanh² ~ 1e-10): the stable form must hold there too
    gen = torch.Generator().manual_seed(0)
    mean = torch.randn(64, 3, generator=gen, dtype=torch.float64) * 3
    log_std = torch.randn(64, 3, generator=gen, dtype=torch.float64).clamp(-3, 1)
    eps = torch.randn(64, 3, generator=gen, dtype=torch.float64) * 2
    a, logp = squashed_sample(mean, log_std, eps)
    u = mean + log_std.exp() * eps
    dist = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform()])
    # log_prob(a) would invert tanh (atanh of ±1.0 overflows), so take the Jacobian at u directly
    ref = Normal(mean, log_std.exp()).log_prob(u).sum(-1) + 2 * torch.log(torch.cosh(u)).sum(-1)
    torch.testing.assert_close(a, torch.tanh(u))
    torch.testing.assert_close(logp, ref, rtol=1e-10, atol=1e-9)
    moderate = u.abs().amax(-1) < 4
    torch.testing.assert_close(logp[moderate], dist.log_prob(torch.tanh(u))[moderate].sum(-1), rtol=1e-8, atol=1e-8)
    assert float(u.abs().max()) > 10  # the extreme region was exercised


def test_log_prob_clamp_caps_the_jacobian_at_log_epsilon():
    mean = torch.tensor([[30.0, -30.0]])  # tanh saturates to exactly ±1 in float32
    log_std, eps = torch.full((1, 2), -1.0), torch.tensor([[0.3, -0.2]])
    gauss = (-0.5 * eps**2 - log_std - 0.5 * math.log(2 * math.pi)).sum()
    _, clamped = squashed_sample(mean, log_std, eps, 1e-6)
    torch.testing.assert_close(clamped[0], gauss - 2 * math.log(1e-6))
    _, exact = squashed_sample(mean, log_std, eps)
    u = mean + log_std.exp() * eps
    exact_jacobian = (2 * (math.log(2) - u.abs() - torch.log1p(torch.exp(-2 * u.abs())))).sum()
    torch.testing.assert_close(exact[0], gauss - exact_jacobian)
    assert exact[0] > clamped[0] + 50  # the exact form keeps growing with |u|


def test_log_prob_clamp_is_invisible_away_from_saturation():
    g = torch.Generator().manual_seed(0)
    mean, log_std, eps = (
        torch.randn(64, 4, generator=g),
        -torch.rand(64, 4, generator=g),
        torch.randn(64, 4, generator=g),
    )
    a, exact = squashed_sample(mean, log_std, eps)
    _, clamped = squashed_sample(mean, log_std, eps, 1e-6)
    # |log(x + 1e-6) - log x| <= 1e-6 / x with x = 1 - a² >= 1 - max a², summed over 4 dimensions
    bound = 4 * 1e-6 / (1 - a.abs().max() ** 2) + 1e-4
    assert (clamped - exact).abs().max() <= bound


def test_xavier_init_is_glorot_uniform_weights_and_zero_biases():
    gen = torch.Generator().manual_seed(0)
    actor = TaskActor(OBS, A, T, [400, 400], generator=gen, init="xavier")
    w = actor.trunk[2]
    bound = math.sqrt(6 / (400 + 400))
    assert w.abs().max() <= bound and w.abs().max() > 0.99 * bound
    # U(-b, b) has std b/sqrt(3); 160k draws put the sample std within 1 % of it
    assert abs(w.std().item() / (bound / math.sqrt(3)) - 1) < 0.01
    assert all(torch.count_nonzero(b) == 0 for b in (actor.trunk[1], actor.trunk[3], actor.head_bias))
    assert actor.head_weight.abs().max() <= math.sqrt(6 / (400 + 2 * A))
    critic = TwinCriticEnsemble(OBS, A, T, [400, 400], generator=gen, init="xavier")
    assert critic.weights[1].abs().max() <= bound and torch.count_nonzero(critic.biases[1]) == 0


def test_torch_init_is_the_nn_linear_default():
    actor = TaskActor(OBS, A, T, [400, 400], generator=torch.Generator().manual_seed(0))
    bound = 1 / math.sqrt(400)
    assert actor.trunk[2].abs().max() <= bound and actor.trunk[3].abs().max() > 0.99 * bound


def _randomise_(params) -> None:
    # non-trivial gains and shifts, so that a dropped or sign-flipped affine term shows
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn(p.shape, generator=gen) * 0.5)


def test_layer_norm_critic_is_torch_layer_norm_in_every_member():
    critic = TwinCriticEnsemble(OBS, A, T, [16, 12], generator=torch.Generator().manual_seed(0), layer_norm=True)
    _randomise_(critic.norms)
    obs, act = torch.randn(T, 5, OBS), torch.randn(T, 5, A)
    q = critic(obs, act)  # [T, 2, 5]
    for t in range(T):
        for j in range(2):
            x = torch.cat([obs[t], act[t]], -1)
            for i in range(2):
                x = x @ critic.weights[i][t, j] + critic.biases[i][t, j, 0]
                ln = torch.nn.LayerNorm(x.shape[-1])
                with torch.no_grad():
                    ln.weight.copy_(critic.norms[2 * i][t, j, 0])
                    ln.bias.copy_(critic.norms[2 * i + 1][t, j, 0])
                x = torch.relu(ln(x))
            ref = (x @ critic.weights[2][t, j] + critic.biases[2][t, j, 0]).squeeze(-1)
            torch.testing.assert_close(q[t, j], ref)


def test_layer_norm_actor_is_torch_layer_norm_before_each_relu():
    actor = TaskActor(OBS, A, T, [16, 12], generator=torch.Generator().manual_seed(0), layer_norm=True)
    _randomise_(actor.norms)
    obs, onehot = torch.randn(7, OBS), torch.eye(T)[torch.arange(7) % T]
    mean, _ = actor(obs, onehot)
    x = obs
    for i in (0, 2):
        ln = torch.nn.LayerNorm(actor.trunk[i].shape[1])
        with torch.no_grad():
            ln.weight.copy_(actor.norms[i])
            ln.bias.copy_(actor.norms[i + 1])
        x = torch.relu(ln(x @ actor.trunk[i] + actor.trunk[i + 1]))
    torch.testing.assert_close(mean, (x @ actor.head_weight + actor.head_bias)[:, :A])
    assert {"norms.0", "norms.3"} <= set(actor.trunk_parameter_names())  # aggregated with the trunk


def _hand_q(weights, biases, task, j, obs, action):
    """Q-network j of critic ``task`` (its own weights[task, j]) written out layer by layer."""
    x = torch.cat([obs, action], dim=-1)
    for i, (w, b) in enumerate(zip(weights, biases)):
        x = x @ w[task, j] + b[task, j, 0]
        if i < len(weights) - 1:
            x = torch.relu(x)
    return x.squeeze(-1)


@pytest.mark.parametrize("out_dim", [1, 3])
def test_critics_on_a_task_grouped_batch_per_task_and_shared(out_dim):
    """``[T, B, ...]`` in, ``[T, 2, B]`` out (``[T, 2, B, out_dim]`` for vector Q-values): per-task
    critics give row t critic t's twins on task t's samples; one shared critic (its task axis of
    size 1) gives every row the same twins, and its weight gradient is the sum over the tasks' samples."""
    gen = torch.Generator().manual_seed(0)
    obs, action = torch.randn(T, 5, OBS, generator=gen), torch.randn(T, 5, A, generator=gen)
    for critics in (T, 1):
        critic = TwinCriticEnsemble(OBS, A, critics, [16, 16], generator=gen, out_dim=out_dim)
        q = critic(obs, action)
        assert q.shape == (T, 2, 5) + ((out_dim,) if out_dim > 1 else ())
        w, b = [p.detach().clone().requires_grad_(True) for p in critic.weights], list(critic.biases)
        hand = torch.stack(
            [
                torch.stack([_hand_q(w, b, t if critics == T else 0, j, obs[t], action[t]) for j in range(2)])
                for t in range(T)
            ]
        )
        torch.testing.assert_close(q, hand, rtol=1e-6, atol=1e-6)
        (q * hand.detach()).sum().backward()  # a gradient that differs per task, twin and sample
        expected = torch.autograd.grad((hand * hand.detach()).sum(), w)
        for got, ref in zip(critic.weights, expected):
            torch.testing.assert_close(got.grad, ref, rtol=1e-5, atol=1e-6)
