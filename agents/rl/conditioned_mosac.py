"""Preference-conditioned MO-SAC: one actor π(a | s, ω) and one twin vector critic Q(s, a, ω) ∈ R^M
for every preference ω on the simplex (``agent.conditioned: true``).

The architecture of CAPQL (Lu, Herman, Yu, ICLR 2023; MORL-Baselines' ``capql.py``): the
preference is an input of both networks, so one set of parameters serves the whole front and
every update trains it, where a population of P policies splits the budget P ways. One update, on
a batch of B transitions, transition b at a preference ω_b drawn afresh:

1. critic: ``y_m = r_m + γ (1 − terminated) (min_j Q̄_{j,m}(s', a', ω_b) − α log π(a'|s', ω_b))``,
   a' ~ π(·|s', ω_b), the twin minimum per objective; loss ``Σ_j mean_b Σ_m (Q_{j,m} − y_m)²``.
2. actor: ``linear`` descends ``mean_b(α log π(ã|s,ω_b) − ω_b · min_j Q_j(s,ã,ω_b))`` (CAPQL's actor
   loss), one backward. An aggregator sees the batch in G groups of B/G at preferences ω_g drawn
   for them: group g's objective losses ``L_{g,m} = mean_{b∈g}(α log π(ã|s,ω_g) − min_j Q_{j,m}(s,ã,ω_g))``
   and their ``[M, D]`` rows (all G from one vmapped ``jacrev``) go through it with preference
   ω_g, from its initial state (a conditioned policy has no per-preference state to carry); the
   actor descends the mean of the G directions.
3. temperature: one ``log α`` (SAC's automatic tuning; CAPQL fixes α = 0.2).
4. targets: Polyak averaging.

Preferences are drawn by CAPQL's sampler (``cone``: within ``cone_degrees`` of the uniform
direction, then L1-normalised) or uniformly on the simplex (``simplex``: Dirichlet(1)); the
replay does not store them, every update draws its own (the critic is off-policy in ω too).
Acting for collection draws one per row likewise; evaluation acts at given preferences.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch.func import jacrev, vmap

from morl.agents.rl.guarded_adam import guarded_step, make_adam
from morl.agents.rl.mosac import (
    LINEAR,
    PRIMARY_FIRST,
    IncompatibleState,
    MOSACConfig,
    PopulationActor,
    _primary_first,
    aggregator_preference,
    build_policy_aggregators,
    preference_matrix,
    regrets,
)
from morl.agents.rl.networks import TwinCriticEnsemble, squashed_sample
from morl.agents.rl.sac_state import SACState


def max_cone_degrees(m: int) -> float:
    """The widest cone around the uniform direction whose points have no negative entry."""
    return math.degrees(math.atan(1.0 / math.sqrt(m - 1)))


def sample_preferences(
    n: int, m: int, method: str, degrees: float, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """``[n, M]`` preferences on the simplex (float32). ``cone``: CAPQL's ``WeightSamplerAngle``:
    ``u + tan(θ) s``, u the unit uniform direction, s a random unit vector ⊥ u, θ ~ U(0, degrees),
    L1-normalised; ``simplex``: Dirichlet(1), normalised exponentials."""
    if method == "simplex":
        e = -torch.log(torch.rand(n, m, generator=generator, device=device).clamp_min(1e-30))
        return e / e.sum(1, keepdim=True)
    u = torch.full((m,), 1.0 / math.sqrt(m), device=device)
    s = torch.randn(n, m, generator=generator, device=device)
    s = s - (s @ u).unsqueeze(1) * u
    s = s / s.norm(dim=1, keepdim=True).clamp_min(1e-30)
    theta = torch.rand(n, 1, generator=generator, device=device) * math.radians(degrees)
    w = torch.tan(theta) * s + u
    return w / w.sum(1, keepdim=True)


class ConditionedMOSAC(SACState):
    """One preference-conditioned SAC policy; its front is drawn at ``preferences [P, M]``
    (``agent.population`` equally spaced preferences, or ``agent.preferences``).

    ``aggregator``: ``"linear"`` or a name of ``morl.aggregators`` (not FAMO), built with ``options``
    and ``check_finite="skip"``, called once per group from its initial state; a method that
    takes a preference gets ω_g.
    """

    conditioned = True

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        reward_dim: int,
        cfg: MOSACConfig,
        aggregator: str = LINEAR,
        options: dict[str, Any] | None = None,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        cfg.validate()
        self.cfg, self.action_dim, self.reward_dim = cfg, int(action_dim), int(reward_dim)
        self.device, self.seed = torch.device(device), int(seed)
        self.host_preferences = preference_matrix(cfg, self.reward_dim)
        self.preferences = self.host_preferences.to(self.device, torch.float32)
        self.population = int(self.preferences.shape[0])
        check_conditioned(cfg, self.reward_dim)
        gen = torch.Generator().manual_seed(self.seed)
        hidden, inputs = [int(h) for h in cfg.hidden_sizes], obs_dim + self.reward_dim
        self.actor = PopulationActor(
            inputs, action_dim, 1, hidden, cfg.log_std_min, cfg.log_std_max, gen, cfg.init, cfg.actor_layer_norm
        ).to(self.device)
        self.critic = TwinCriticEnsemble(
            inputs, action_dim, 1, hidden, generator=gen, init=cfg.init, layer_norm=cfg.critic_layer_norm,
            out_dim=self.reward_dim,
        ).to(self.device)  # fmt: skip
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.full((), math.log(cfg.init_temperature), device=self.device, requires_grad=True)
        self.target_entropy = float(-action_dim if cfg.target_entropy is None else cfg.target_entropy)
        self.actor_opt = make_adam(self.actor.parameters(), cfg.actor_lr)
        self.critic_opt = make_adam(self.critic.parameters(), cfg.critic_lr)
        self.alpha_opt = make_adam([self.log_alpha], cfg.alpha_lr)
        for q in [*self.actor.parameters(), *self.critic.parameters(), self.log_alpha]:
            q.grad = torch.zeros_like(q)  # written in place every update
        on_meta = self.device.type == "meta"
        self.generator = None if on_meta else torch.Generator(device=self.device).manual_seed(self.seed + 1)
        # the aggregated path draws ω on the host: the aggregators take their preference there
        self.host_generator = torch.Generator().manual_seed(self.seed + 2)
        self.aggregator_name = aggregator
        built = build_policy_aggregators(aggregator, options or {}, self.host_preferences[:1])
        self.aggregator = None if built is None else built[0]
        self._init_counters(self.device)

    # -- acting ---------------------------------------------------------------------------
    def _policy(self, obs: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(torch.cat([obs, w.to(obs.dtype)], dim=-1))
        return mean[0], log_std[0]

    @torch.no_grad()
    def act(self, obs: torch.Tensor, preferences: torch.Tensor | None = None, deterministic: bool = False):
        """Actions ``[N, A]`` in ``[-1, 1]`` for rows ``obs [N, O]`` at ``preferences [N, M]``
        (None: one freshly drawn preference per row, as collection does)."""
        obs = obs.to(self.device, torch.float32)
        if obs.dim() != 2:
            raise ValueError(f"obs must be [N, obs_dim], got {tuple(obs.shape)}")
        if preferences is None:
            w = self._draw(obs.shape[0], self.generator)
        else:
            w = torch.as_tensor(preferences, dtype=torch.float32).to(self.device)
            if w.shape != (obs.shape[0], self.reward_dim):
                raise ValueError(f"preferences must be [N={obs.shape[0]}, M={self.reward_dim}], got {tuple(w.shape)}")
        mean, log_std = self._policy(obs, w)
        if deterministic:
            return torch.tanh(mean)
        eps = torch.randn(mean.shape, device=self.device, generator=self.generator)
        return squashed_sample(mean, log_std, eps)[0]

    def _draw(self, n: int, generator: torch.Generator | None, device: torch.device | None = None) -> torch.Tensor:
        cfg = self.cfg
        return sample_preferences(
            n, self.reward_dim, cfg.preference_sampling, cfg.cone_degrees, generator, device or self.device
        )

    def _alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def _noise(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, self.action_dim, device=self.device, generator=self.generator)

    # -- one update -----------------------------------------------------------------------
    def update(self, batch: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        """One update from ``obs [B, O]``, ``reward [B, M]``, ...; detached device tensors back."""
        obs, reward, groups = batch["obs"], batch["reward"], self.cfg.groups
        if obs.dim() != 2 or reward.shape != (obs.shape[0], self.reward_dim) or obs.shape[0] % groups:
            raise ValueError(
                f"batch must hold obs [B, obs_dim] and reward [B, M={self.reward_dim}] with B a multiple of "
                f"agent.groups={groups}, got {tuple(obs.shape)} and {tuple(reward.shape)}"
            )
        rows = self._draw(obs.shape[0], self.generator)  # [B, M]: a preference per transition, as CAPQL
        if self.aggregator is not None:  # the aggregators' group preferences, on the host where they take them
            w_host = self._draw(groups, self.host_generator, torch.device("cpu"))
            w = w_host.to(self.device)
        alpha = self._alpha()
        critic_loss, ok = self._critic_step(batch, rows, alpha)
        metrics = {"critic_loss": critic_loss.detach()}
        if step % self.cfg.actor_update_freq == 0:
            if self.aggregator is None:
                logp, actor_ok, actor_metrics = self._linear_actor_step(obs, rows, alpha)
            elif not self.aggregator.needs_grads:
                logp, actor_ok, actor_metrics = self._weighted_actor_step(obs, w, w_host, alpha)
            else:
                logp, actor_ok, actor_metrics = self._aggregated_actor_step(obs, w, w_host, alpha)
            alpha_loss, alpha_ok = self._alpha_step(logp)
            ok = ok & actor_ok & alpha_ok
            metrics.update(actor_metrics, entropy=-logp.mean(), alpha_loss=alpha_loss)
        if step % self.cfg.target_update_freq == 0:
            with torch.no_grad():
                torch._foreach_lerp_(
                    list(self.critic_target.parameters()), list(self.critic.parameters()), self.cfg.tau
                )
        return {**metrics, "alpha": self._alpha().clone(), **self._count_nonfinite(ok)}

    # -- critic ---------------------------------------------------------------------------
    def critic_losses(self, batch: dict[str, torch.Tensor], rows: torch.Tensor, alpha, eps_next) -> torch.Tensor:
        """``[M]``: objective m's loss, the sum over the twins of the mean squared TD error."""
        next_obs = batch["next_obs"]
        with torch.no_grad():
            mean, log_std = self._policy(next_obs, rows)
            next_action, next_logp = squashed_sample(mean, log_std, eps_next)
            q_next = self.critic_target(torch.cat([next_obs, rows], -1), next_action)[0].amin(0)  # [B, M]
            soft = q_next - alpha * next_logp.unsqueeze(-1)
            target = batch["reward"] + self.cfg.gamma * (1.0 - batch["terminated"]).unsqueeze(-1) * soft
        q = self.critic(torch.cat([batch["obs"], rows], -1), batch["action"])[0]  # [2, B, M]
        return (q - target).pow(2).mean(-2).sum(0)

    def _critic_step(self, batch, rows, alpha) -> tuple[torch.Tensor, torch.Tensor]:
        self.critic_opt.zero_grad(set_to_none=False)
        losses = self.critic_losses(batch, rows, alpha, self._noise(rows.shape[0]))
        losses.sum().backward()
        return losses, guarded_step(self.critic_opt, list(self.critic.parameters()), self.cfg.grad_clip)

    # -- actor ----------------------------------------------------------------------------
    def group_losses(self, actor, critic, obs, w, eps, alpha):
        """One group's objective losses ``[M]`` at its preference ``w [M]``, and as auxiliary output
        its log π ``[b]`` and batch-mean Q-values ``[M]``; ``actor``/``critic`` hold the weights."""
        x = torch.cat([obs, w.expand(obs.shape[0], -1)], -1)
        mean, log_std = self.actor.outputs(actor, x)
        act, logp = squashed_sample(mean[0], log_std[0], eps)
        q = self._q(critic, x, act).mean(0)  # [M]
        return alpha * logp.mean() - q, (logp.detach(), q.detach())

    @staticmethod
    def _q(critic, x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``[b, M]``: the twin minimum per objective of the critic held in ``critic``."""
        weights, biases, norms = critic
        return TwinCriticEnsemble.q_values(weights, biases, x, action, norms)[0].amin(0)

    def _frozen_critic(self) -> tuple[list[torch.Tensor], ...]:
        # detached: the actor's losses leave no critic gradient
        return tuple([t.detach() for t in ts] for ts in (self.critic.weights, self.critic.biases, self.critic.norms))

    def _linear_actor_step(self, obs, rows, alpha) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """CAPQL's actor loss ``mean_b(α log π(ã|s,ω_b) − ω_b · min_j Q_j(s,ã,ω_b))``, one backward."""
        self.actor_opt.zero_grad(set_to_none=False)
        mean, log_std = self._policy(obs, rows)
        act, logp = squashed_sample(mean, log_std, self._noise(obs.shape[0]))
        q_rows = self._q(self._frozen_critic(), torch.cat([obs, rows], -1), act)  # [B, M]
        (alpha * logp - (rows * q_rows).sum(-1)).mean().backward()
        ok = guarded_step(self.actor_opt, list(self.actor.parameters()), self.cfg.grad_clip)
        actor_loss = alpha * logp.detach().mean() - q_rows.detach().mean(0)
        return logp.detach(), ok, {"actor_loss": actor_loss}

    def _weighted_actor_step(self, obs, w, w_host, alpha) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """A loss weighting (``needs_grads`` False, e.g. EPO-AL): one backward of the mean over the
        groups of ``aggregator.weighted_loss(J_g)`` at ω_g, whose gradient is the mean direction."""
        g = w.shape[0]
        self.actor_opt.zero_grad(set_to_none=False)
        obs_g = obs.unflatten(0, (g, -1))
        actor = dict(self.actor.named_parameters())
        fn = vmap(self.group_losses, in_dims=(None, None, 0, 0, 0, None))
        losses, (logp, q) = fn(actor, self._frozen_critic(), obs_g, w, self._noise(g, obs_g.shape[1]), alpha)
        j = regrets(losses, q)
        torch.stack([self._call(i, w_host, self.aggregator.weighted_loss, j[i]) for i in range(g)]).mean().backward()
        ok = guarded_step(self.actor_opt, list(self.actor.parameters()), self.cfg.grad_clip)
        return logp.flatten(), ok, {"actor_loss": losses.detach().mean(0)}

    def _call(self, i: int, w_host: torch.Tensor, method, *args) -> torch.Tensor:
        """``method(*args)`` of the aggregator from its initial state, at group i's preference."""
        self.aggregator.reset()  # a conditioned policy has no per-preference state to carry
        if hasattr(self.aggregator, "set_preference"):
            self.aggregator.set_preference(aggregator_preference(self.aggregator_name, w_host[i].double()))
        return method(*args)

    def _aggregated_actor_step(self, obs, w, w_host, alpha) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Group g's rows ``[M, D]`` through the aggregator at ω_g; the actor descends their mean."""
        g, names = w.shape[0], [n for n, _ in self.actor.named_parameters()]
        actor = {k: v.detach() for k, v in self.actor.named_parameters()}
        obs_g = obs.unflatten(0, (g, -1))
        eps = self._noise(g, obs_g.shape[1])
        fn = jacrev(self.group_losses, has_aux=True)
        jac, (logp, q) = vmap(fn, in_dims=(None, None, 0, 0, 0, None))(
            actor, self._frozen_critic(), obs_g, w, eps, alpha
        )
        grads = torch.cat([jac[n].flatten(2) for n in names], dim=2)  # [G, M, D]
        losses = alpha * logp.mean(-1, keepdim=True) - q  # [G, M]
        j = regrets(losses, q)
        if self.aggregator_name in PRIMARY_FIRST:  # group g's primary objective argmax ω_g first
            order = [_primary_first(w_host[i]).to(self.device) for i in range(g)]
            grads, j = (
                torch.stack([grads[i, o] for i, o in enumerate(order)]),
                torch.stack([j[i, o] for i, o in enumerate(order)]),
            )
        directions = [self._call(i, w_host, self.aggregator, grads[i], j[i]) for i in range(g)]
        direction = torch.stack(directions).mean(0)
        params = list(self.actor.parameters())
        for p, d in zip(params, torch.split(direction, [p.numel() for p in params])):
            p.grad.copy_(d.view_as(p))
        finite_rows = torch.isfinite(grads.pow(2).sum(-1)).all()  # a NaN/inf row refuses the step
        ok = guarded_step(self.actor_opt, params, self.cfg.grad_clip, finite_rows)
        return logp.flatten(), ok, {"actor_loss": losses.detach().mean(0)}

    # -- temperature ----------------------------------------------------------------------
    def _alpha_step(self, logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``mean_b α (−log π − H̄)``, SAC's automatic temperature."""
        self.alpha_opt.zero_grad(set_to_none=False)
        loss = (self.log_alpha.exp() * (-logp - self.target_entropy).detach()).mean()
        loss.backward()
        return loss.detach(), guarded_step(self.alpha_opt, [self.log_alpha], self.cfg.grad_clip)

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks, target, optimizers, temperature, generators and counters."""
        return {
            "conditioned": True,
            "generator": None if self.generator is None else self.generator.get_state(),
            "host_generator": self.host_generator.get_state(),
            **self._sac_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; a population's state raises :class:`IncompatibleState` (one line)."""
        if not state.get("conditioned"):
            raise IncompatibleState("the state is of an MO-SAC population; this agent is preference-conditioned")
        own = {k: tuple(v.shape) for k, v in self.critic.state_dict().items()}
        if {k: tuple(v.shape) for k, v in state["critic"].items()} != own:
            raise IncompatibleState("the state's networks have other sizes (agent.hidden_sizes or layer norms)")
        self._load_sac_state(state)
        if self.generator is not None and state["generator"] is not None:
            self.generator.set_state(state["generator"].cpu())
        self.host_generator.set_state(state["host_generator"].cpu())


def check_conditioned(cfg: MOSACConfig, m: int) -> None:
    """``ValueError`` naming what a conditioned MO-SAC cannot take."""
    if cfg.assignment != "fixed":
        raise ValueError(
            "agent.assignment=transport re-assigns a population's preferences; a conditioned agent has none"
        )
    if cfg.batch_size % cfg.groups:
        raise ValueError(f"agent.batch_size={cfg.batch_size} must be a multiple of agent.groups={cfg.groups}")
    if cfg.preference_sampling == "cone" and not 0 < cfg.cone_degrees <= max_cone_degrees(m):
        raise ValueError(
            f"agent.cone_degrees must lie in (0, {max_cone_degrees(m):.2f}] for {m} objectives "
            f"(wider cones leave the simplex), got {cfg.cone_degrees}"
        )
