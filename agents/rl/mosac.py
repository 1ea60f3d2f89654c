"""MO-SAC: a population of P soft actor-critic policies, one per preference ω_p on the simplex,
trained together as one batched ensemble on one shared replay of vector rewards.

One update, on a batch of B transitions shared by all policies (``obs [B, O]``, ``reward [B, M]``):

1. critics: policy p's twin critic is member p of a ``TwinCriticEnsemble`` with P members and M
   outputs, Q_{j,p}(s, a) ∈ R^M (j = 1, 2); output m regresses on reward component m with policy
   p's soft TD target ``y = r_m + γ (1 − terminated) (min_j Q̄_{j,p,m}(s', a'_p) − α_p log π_p(a'_p|s'))``,
   a'_p ~ π_p, the minimum over the twins taken per objective; the critics descend the sum of
   their P·M losses (the hidden layers of policy p's critic serve its M objectives).
2. actor: policy p's objective losses ``L_{p,m} = mean_b(α_p log π_p(ã|s) − min_j Q_{j,p,m}(s, ã))``
   go through the aggregator: ``linear`` descends ``Σ_m ω_{p,m} L_{p,m}`` (one backward);
   every other aggregator maps policy p's ``[M, D_p]`` gradient matrix (all P matrices from one
   vmapped pass) to one direction.
3. temperatures: one ``log α_p`` per policy, each driven by its own policy's entropy.
4. targets: Polyak averaging of the critic ensemble.

The preferences are fixed (``agent.assignment: fixed``) or, with ``transport``, re-assigned every
``assign_every`` updates by MosT's transport plan between objectives and policies (arXiv 2403.04099,
Eq. 5): ``ω_p = Γ[:, p] / Σ_m Γ[m, p]`` for the cost ``C_{m,p}`` of policy p's standardised
batch-mean Q-value of objective m, negated.

No Python loop over policies or objectives in the forward and backward passes (the actors are
one stacked network, the critics one ensemble of vector-valued critics); the aggregator is called
once per policy.
Non-finite steps are skipped on the device, as in MT-SAC (``agents/rl/guarded_adam.py``).
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.func import jacrev, vmap

from morl import transport
from morl.agents.rl.guarded_adam import guarded_step, make_adam
from morl.agents.rl.networks import (
    INIT_CHOICES,
    TwinCriticEnsemble,
    _init_layer_,
    _norm_parameters,
    layer_norm,
    squashed_sample,
)
from morl.agents.rl.sac_state import SACState
from morl.aggregators.base import Aggregator

LINEAR = "linear"  # linear scalarisation Σ_m ω_m L_m: not an aggregator of the registry, one backward
EPO_FLOOR = 1e-3  # EPO-AL needs every preference entry > 0: zeros of ω are raised to this
PRIMARY_FIRST = ("pcd",)  # aggregators whose row 0 is the primary objective: argmax_m ω_{p,m} goes first
ASSIGNMENTS = ("fixed", "transport")
SAMPLINGS = ("cone", "simplex")  # how a conditioned agent draws its training preferences
# IPOT's defaults (step 0.01, 200 steps) stop short of the optimum on these small standardised costs
# (99 of 400 random M x P draws up to 0.15 above POT's emd); with these 1 of 400, by 1.2e-5
IPOT_OPTIONS = {"step": 0.05, "max_iter": 1000}


class IncompatibleState(ValueError):
    """A state (checkpoint) of another population: other preferences or another critic layout."""


@dataclass
class MOSACConfig:
    """Hyperparameters of MO-SAC (the ``agent:`` section of an ``mo`` config); defaults = SAC's."""

    population: int = 6
    preferences: list[list[float]] | None = None  # [P][M] rows on the simplex; None: equally spaced
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4  # 0: a fixed temperature (CAPQL's, with init_temperature 0.2)
    gamma: float = 0.99
    tau: float = 0.005
    init_temperature: float = 1.0
    target_entropy: float | None = None
    batch_size: int = 256
    buffer_capacity: int = 1_000_000
    grad_clip: float | None = None
    actor_update_freq: int = 1
    target_update_freq: int = 1
    log_std_min: float = -20.0
    log_std_max: float = 2.0
    init: str = "torch"
    critic_layer_norm: bool = False
    actor_layer_norm: bool = False
    assignment: str = "fixed"  # fixed: ω_p as given; transport: MosT's plan re-assigns them
    assign_every: int = 1000  # updates between two transport assignments (the first update assigns)
    transport_tau: float = 0.0  # MosT's τ, weight of the diversity regulariser R(Γ)
    transport_method: str = "ipot"  # ipot (exact OT) | sinkhorn (entropic)
    conditioned: bool = False  # one preference-conditioned actor and critic (agents/rl/conditioned_mosac.py)
    groups: int = 4  # conditioned: preferences per update, the batch split evenly among them
    preference_sampling: str = "cone"  # conditioned: cone (CAPQL's) | simplex (Dirichlet(1))
    cone_degrees: float = 22.5  # conditioned: the cone's half-angle around the uniform preference (CAPQL's)
    collect_envs: int = 1  # conditioned: training sub-envs, each acting at a freshly drawn preference

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field and what is allowed."""
        if self.population < 1:
            raise ValueError(f"agent.population must be >= 1, got {self.population}")
        if self.preferences is not None and len(self.preferences) != self.population:
            raise ValueError(
                f"agent.preferences has {len(self.preferences)} rows but agent.population={self.population}; "
                "give one preference per policy"
            )
        if not self.hidden_sizes or any(int(h) < 1 for h in self.hidden_sizes):
            raise ValueError(f"agent.hidden_sizes must be a non-empty list of positive ints, got {self.hidden_sizes}")
        for name in ("actor_lr", "critic_lr", "init_temperature", "batch_size", "buffer_capacity"):
            if not getattr(self, name) > 0:
                raise ValueError(f"agent.{name} must be > 0, got {getattr(self, name)}")
        if not (self.alpha_lr >= 0 and math.isfinite(self.alpha_lr)):
            raise ValueError(
                f"agent.alpha_lr must be >= 0 (0: the temperature stays at init_temperature), got {self.alpha_lr}"
            )
        if not (0 <= self.gamma <= 1 and 0 < self.tau <= 1):
            raise ValueError(f"agent.gamma must lie in [0, 1] and agent.tau in (0, 1], got {self.gamma} and {self.tau}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"agent.grad_clip must be > 0 or null, got {self.grad_clip}")
        if self.actor_update_freq < 1 or self.target_update_freq < 1:
            raise ValueError("agent.actor_update_freq and agent.target_update_freq must be >= 1")
        if not self.log_std_min < self.log_std_max:
            raise ValueError(f"agent.log_std_min ({self.log_std_min}) must be < agent.log_std_max ({self.log_std_max})")
        if self.init not in INIT_CHOICES:
            raise ValueError(f"agent.init={self.init!r} is not valid; allowed: {', '.join(INIT_CHOICES)}")
        self._validate_assignment()
        if self.groups < 1 or self.collect_envs < 1:
            raise ValueError(
                f"agent.groups and agent.collect_envs must be >= 1, got {self.groups} and {self.collect_envs}"
            )
        if self.preference_sampling not in SAMPLINGS:
            raise ValueError(
                f"agent.preference_sampling={self.preference_sampling!r} is not valid; allowed: {', '.join(SAMPLINGS)}"
            )

    def _validate_assignment(self) -> None:
        if self.assignment not in ASSIGNMENTS:
            raise ValueError(f"agent.assignment={self.assignment!r} is not valid; allowed: {', '.join(ASSIGNMENTS)}")
        if not self.assign_every >= 1 or self.assign_every % self.actor_update_freq:
            raise ValueError(
                f"agent.assign_every must be a multiple >= 1 of agent.actor_update_freq={self.actor_update_freq} "
                f"(the assignment reads the actor step's Q-values), got {self.assign_every}"
            )
        if not (self.transport_tau >= 0 and math.isfinite(self.transport_tau)):
            raise ValueError(f"agent.transport_tau must be a finite number >= 0, got {self.transport_tau}")
        if self.transport_method not in transport.SOLVERS:
            raise ValueError(
                f"agent.transport_method={self.transport_method!r} is not valid; allowed: {', '.join(transport.SOLVERS)}"
            )


def lattice_size(m: int, h: int) -> int:
    """Points of the simplex lattice ``{w : w_i ∈ {0, 1/h, ..., 1}, Σ w = 1}``: C(h + m − 1, m − 1)."""
    return math.comb(h + m - 1, m - 1)


def default_preferences(m: int, population: int) -> torch.Tensor:
    """``[P, M]`` equally spaced preferences, the simplex's corners included (float64).

    One policy: the uniform preference. Otherwise Das & Dennis' simplex lattice with step 1/h
    when P is one of its sizes C(h + M − 1, M − 1) (any P for M = 2: ``linspace``), else the
    shipped Riesz s-energy set ``equally_spaced_weights(M, P)`` (MORL-Baselines').
    """
    from morl.metrics.pareto import equally_spaced_weights

    if m < 2:
        raise ValueError(f"a multi-objective env has at least 2 objectives, got {m}")
    if population == 1:
        return torch.full((1, m), 1.0 / m, dtype=torch.float64)
    h = next((h for h in range(1, population) if lattice_size(m, h) >= population), population)
    if lattice_size(m, h) == population:
        # compositions of h into m parts, first objective's share descending
        points = [c for c in itertools.product(range(h, -1, -1), repeat=m) if sum(c) == h]
        return torch.tensor(points, dtype=torch.float64) / h
    try:
        return equally_spaced_weights(m, population)
    except ValueError:
        sizes = [lattice_size(m, h) for h in range(1, 8)]
        raise ValueError(
            f"agent.population={population}: no equally spaced set of {population} preferences for {m} objectives; "
            f"allowed: {', '.join(map(str, sizes))} (simplex lattices), 10, 20, 50, 100, or give agent.preferences"
        ) from None


def preference_matrix(cfg: MOSACConfig, m: int) -> torch.Tensor:
    """The population's preferences ``[P, M]`` (float64), each row normalised to sum 1."""
    if cfg.preferences is None:
        return default_preferences(m, cfg.population)
    w = torch.as_tensor(cfg.preferences, dtype=torch.float64)
    if w.dim() != 2 or w.shape[1] != m:
        raise ValueError(f"agent.preferences must have {m} entries per row (one per objective), got {cfg.preferences}")
    if not bool(torch.isfinite(w).all() & (w >= 0).all() & (w.sum(1) > 0).all()):
        raise ValueError(f"agent.preferences must be finite, >= 0 and not all 0 in a row, got {cfg.preferences}")
    return w / w.sum(1, keepdim=True)


class PopulationActor(nn.Module):
    """P squashed-Gaussian MLP actors with stacked weights ``[P, in, out]``, evaluated as one batched matmul.

    ``forward(obs)`` takes a batch shared by all policies ``[B, O]`` or one batch per policy
    ``[P, B, O]`` and returns ``(mean, log_std)`` ``[P, B, A]``. :meth:`outputs` with one policy's
    weights (``[in, out]``, as ``vmap`` over the population sees them) and ``[B, O]`` gives ``[B, A]``.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        population: int,
        hidden_sizes: list[int],
        log_std_min: float = -20.0,
        log_std_max: float = 2.0,
        generator: torch.Generator | None = None,
        init: str = "torch",
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        sizes = [obs_dim, *hidden_sizes, 2 * action_dim]
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = nn.Parameter(torch.empty(population, fan_in, fan_out))
            b = nn.Parameter(torch.empty(population, 1, fan_out))
            _init_layer_(w, b, fan_in, fan_out, init, generator)
            self.weights.append(w)
            self.biases.append(b)
        self.norms = _norm_parameters([[population, 1, h] for h in hidden_sizes] if layer_norm else [])

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.outputs(dict(self.named_parameters()), obs)

    def outputs(self, params: dict[str, torch.Tensor], obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, last = obs, len(self.weights) - 1
        for i in range(last + 1):
            x = torch.matmul(x, params[f"weights.{i}"]) + params[f"biases.{i}"]
            if i < last:
                if self.norms:
                    x = layer_norm(x, params[f"norms.{2 * i}"], params[f"norms.{2 * i + 1}"])
                x = torch.relu(x)
        mean, raw_log_std = x.chunk(2, dim=-1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw_log_std) + 1)
        return mean, log_std


class MOSAC(SACState):
    """A population of P SAC policies, policy p for preference ``preferences[p]``, each with a twin
    critic of M outputs (one per objective).

    ``aggregator``: ``"linear"`` (scalarisation by ω_p) or a name of ``morl.aggregators``, built
    once per policy with ``options`` (and ``check_finite="skip"``). Aggregators that take a
    preference vector (``epo_al``'s ``preference``, ``upgrad``/``config``/``aligned_mtl``'s
    ``pref_vector``) get ω_p; ``pcd`` gets the objective with the largest ω_{p,m} as its primary.
    With ``cfg.assignment == "transport"`` every ``cfg.assign_every``-th update (the first included)
    replaces the preferences by :func:`transport_preferences` of its actor step's Q-values before
    they weigh that step (:meth:`set_preferences`).
    """

    conditioned = False

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
        self.config_preferences = preference_matrix(cfg, self.reward_dim)  # float64, host: checks a checkpoint
        # the ones in use (float64, host: aggregator options, evaluation labels); transport re-assigns them
        self.host_preferences = self.config_preferences.clone()
        self.preferences = self.host_preferences.to(self.device, torch.float32)
        self.population = p = int(self.preferences.shape[0])
        gen = torch.Generator().manual_seed(self.seed)
        hidden = [int(h) for h in cfg.hidden_sizes]
        self.actor = PopulationActor(
            obs_dim, action_dim, p, hidden, cfg.log_std_min, cfg.log_std_max, gen, cfg.init, cfg.actor_layer_norm
        ).to(self.device)
        self.critic = TwinCriticEnsemble(
            obs_dim,
            action_dim,
            p,
            hidden,
            generator=gen,
            init=cfg.init,
            layer_norm=cfg.critic_layer_norm,
            out_dim=self.reward_dim,
        ).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.full((p,), math.log(cfg.init_temperature), device=self.device, requires_grad=True)
        self.target_entropy = float(-action_dim if cfg.target_entropy is None else cfg.target_entropy)
        self.actor_opt = make_adam(self.actor.parameters(), cfg.actor_lr)
        self.critic_opt = make_adam(self.critic.parameters(), cfg.critic_lr)
        self.alpha_opt = make_adam([self.log_alpha], cfg.alpha_lr)
        for q in [*self.actor.parameters(), *self.critic.parameters(), self.log_alpha]:
            q.grad = torch.zeros_like(q)  # written in place every update
        self.generator = (
            None if self.device.type == "meta" else torch.Generator(device=self.device).manual_seed(self.seed + 1)
        )
        self.aggregator_name = aggregator
        self.aggregators = build_policy_aggregators(aggregator, options or {}, self.host_preferences)
        self._one_backward = self.aggregators is None or not self.aggregators[0].needs_grads
        self._order = None
        self._policy_rows = torch.arange(p, device=self.device).unsqueeze(1)
        self._set_order()
        self._init_counters(self.device)

    # -- acting ---------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Actions ``[P, A]`` in ``[-1, 1]``: row p is policy p's action for observation ``obs[p]`` (``[P, O]``)."""
        obs = obs.to(self.device, torch.float32)
        if obs.dim() != 2 or obs.shape[0] != self.population:
            raise ValueError(f"obs must be [P={self.population}, obs_dim] (row p for policy p), got {tuple(obs.shape)}")
        mean, log_std = self.actor(obs.unsqueeze(1))  # [P, 1, A]
        if deterministic:
            return torch.tanh(mean[:, 0])
        eps = torch.randn(mean.shape, device=self.device, generator=self.generator)
        return squashed_sample(mean, log_std, eps)[0][:, 0]

    def _set_order(self) -> None:
        """Row order per policy: the primary objective first for the aggregators that have one (else as given)."""
        if self.aggregator_name in PRIMARY_FIRST:
            self._order = torch.stack([_primary_first(w) for w in self.host_preferences]).to(self.device)
            self._unorder = torch.argsort(self._order, dim=1)

    def set_preferences(self, preferences: torch.Tensor) -> None:
        """Policy p's preference becomes row p of ``preferences [P, M]`` (host, rows on the simplex),
        for ``linear`` and every aggregator that takes one (EPO-AL's zeros raised to ``EPO_FLOOR``)."""
        self.host_preferences = preferences.detach().to("cpu", torch.float64).clone()
        self.preferences = self.host_preferences.to(self.device, torch.float32)
        if self.aggregators is not None and hasattr(self.aggregators[0], "set_preference"):
            for agg, w in zip(self.aggregators, self.host_preferences):
                agg.set_preference(aggregator_preference(self.aggregator_name, w))
        self._set_order()

    def _assign(self, q: torch.Tensor) -> None:
        """MosT's assignment from this batch's Q-values ``[P, M]``; the solve reads the cost and the
        plan back to the host (once every ``assign_every`` updates)."""
        if not bool(torch.isfinite(q).all()):
            return  # a skipped update's NaN/inf Q-values: the preferences stay
        _, preferences = transport_preferences(q.double(), self.cfg.transport_tau, self.cfg.transport_method)
        self.set_preferences(preferences)

    def _alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def _noise(self, b: int) -> torch.Tensor:
        return torch.randn(self.population, b, self.action_dim, device=self.device, generator=self.generator)

    # -- one update -----------------------------------------------------------------------
    def update(self, batch: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        """One update from a batch shared by all policies (``obs [B, O]``, ``reward [B, M]``, ...);
        returns detached device tensors, nothing read back to the host."""
        obs, action, reward = batch["obs"], batch["action"], batch["reward"]
        if obs.dim() != 2 or reward.shape != (obs.shape[0], self.reward_dim):
            raise ValueError(
                f"batch must hold obs [B, obs_dim] and reward [B, M={self.reward_dim}], "
                f"got {tuple(obs.shape)} and {tuple(reward.shape)}"
            )
        alpha = self._alpha()
        critic_loss, ok = self._critic_step(obs, action, reward, batch["next_obs"], batch["terminated"], alpha)
        metrics = {"critic_loss": critic_loss.detach()}
        if step % self.cfg.actor_update_freq == 0:
            assign = self.cfg.assignment == "transport" and step % self.cfg.assign_every == 0
            logp, actor_ok, actor_metrics = self._actor_step(obs, alpha, assign)
            alpha_loss, alpha_ok = self._alpha_step(logp)
            ok = ok & actor_ok & alpha_ok
            metrics.update(actor_metrics, entropy=-logp.mean(-1), alpha_loss=alpha_loss)
        if step % self.cfg.target_update_freq == 0:
            with torch.no_grad():
                torch._foreach_lerp_(
                    list(self.critic_target.parameters()), list(self.critic.parameters()), self.cfg.tau
                )
        return {
            **metrics,
            "alpha": self._alpha().clone(),
            "preferences": self.preferences.clone(),
            **self._count_nonfinite(ok),
        }

    # -- critics --------------------------------------------------------------------------
    def td_target(self, reward, next_obs, terminated, alpha, eps_next) -> torch.Tensor:
        """``[P, B, M]``: the soft TD target of policy p's critic for objective m (no gradient); the
        minimum over the twins is taken per objective."""
        with torch.no_grad():
            mean, log_std = self.actor(next_obs)  # [P, B, A]: every policy on the shared batch
            next_action, next_logp = squashed_sample(mean, log_std, eps_next)
            obs_p = next_obs.expand(self.population, *next_obs.shape)  # [P, B, O]
            q_next = self.critic_target(obs_p, next_action).amin(1)  # [P, 2, B, M] -> [P, B, M]
            soft = q_next - alpha.view(-1, 1, 1) * next_logp.unsqueeze(-1)
            return reward + self.cfg.gamma * (1.0 - terminated).unsqueeze(-1) * soft

    def critic_losses(self, obs, action, reward, next_obs, terminated, alpha, eps_next) -> torch.Tensor:
        """``[P, M]``: the loss of policy p's critic on objective m, the sum over its twins of the mean
        squared TD error."""
        target = self.td_target(reward, next_obs, terminated, alpha, eps_next)
        q = self.critic(obs, action)  # [P, 2, B, M]
        return (q - target.unsqueeze(1)).pow(2).mean(-2).sum(1)

    def _critic_step(self, obs, action, reward, next_obs, terminated, alpha) -> tuple[torch.Tensor, torch.Tensor]:
        self.critic_opt.zero_grad(set_to_none=False)
        losses = self.critic_losses(obs, action, reward, next_obs, terminated, alpha, self._noise(obs.shape[0]))
        # disjoint policies' critics; within one, the hidden layers descend the sum over its objectives
        losses.sum().backward()
        return losses, guarded_step(self.critic_opt, list(self.critic.parameters()), self.cfg.grad_clip)

    # -- actor ----------------------------------------------------------------------------
    def policy_losses(self, actor_p, critic_p, obs, eps, alpha_p):
        """One policy's objective losses ``[M]`` and, as auxiliary output, its log π ``[B]`` and
        its batch-mean Q-values ``[M]``; ``actor_p``/``critic_p`` hold that policy's weights."""
        mean, log_std = self.actor.outputs(actor_p, obs)
        act, logp = squashed_sample(mean, log_std, eps)
        weights, biases, norms = critic_p
        q = TwinCriticEnsemble.q_values(weights, biases, obs, act, norms).amin(0).mean(0)  # [2, B, M] -> [M]
        return alpha_p * logp.mean() - q, (logp.detach(), q.detach())

    def _vmapped(self, fn, obs, eps, alpha, detach_actor: bool):
        actor = {k: (v.detach() if detach_actor else v) for k, v in self.actor.named_parameters()}
        # detached: the actor's losses leave no critic gradient
        critic = tuple([t.detach() for t in ts] for ts in (self.critic.weights, self.critic.biases, self.critic.norms))
        return vmap(fn, in_dims=(0, 0, None, 0, 0))(actor, critic, obs, eps, alpha)

    def _actor_step(
        self, obs, alpha, assign: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """One step of the population's actors; returns log π ``[P, B]``, whether it was taken, its metrics.
        ``assign``: re-assign the preferences from this step's Q-values before they weigh its losses."""
        eps = self._noise(obs.shape[0])
        params = list(self.actor.parameters())
        self.actor_opt.zero_grad(set_to_none=False)
        metrics, finite_rows = {}, None
        if self._one_backward:
            losses, (logp, q) = self._vmapped(self.policy_losses, obs, eps, alpha, detach_actor=False)
            if assign:
                self._assign(q)
            total, weights = self._weighted_loss(losses, q)
            total.backward()  # disjoint actors: policy p gets ∇ Σ_m w_{p,m} L_{p,m}
        else:
            jac, (logp, q) = self._vmapped(jacrev(self.policy_losses, has_aux=True), obs, eps, alpha, True)
            grads = torch.cat([jac[n].flatten(2) for n, _ in self.actor.named_parameters()], dim=2)  # [P, M, D_p]
            losses = alpha.unsqueeze(1) * logp.mean(-1, keepdim=True) - q
            if assign:
                self._assign(q)
            direction, weights = self._aggregate(grads, regrets(losses, q))
            for p, d in zip(params, torch.split(direction, [p[0].numel() for p in params], dim=1)):
                p.grad.copy_(d.view_as(p))
            gram = grads @ grads.transpose(1, 2)  # [P, M, M]: one pass over the rows serves both checks
            finite_rows = torch.isfinite(gram.diagonal(dim1=1, dim2=2)).all()  # NaN/inf rows: non-finite norms
            metrics["grad_cos"] = _objective_cosines(gram)
        if weights is not None:
            metrics["agg_weights"] = weights.detach()
        ok = guarded_step(self.actor_opt, params, self.cfg.grad_clip, finite_rows)
        return logp, ok, {"actor_loss": losses.detach(), **metrics}

    def _weighted_loss(self, losses: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The one-backward path's loss ``Σ_p Σ_m w_{p,m} L_{p,m}`` and its weights ``[P, M]``: ω for
        ``linear``, else each policy's aggregator's weights of its ``regrets`` (their gradients are L's)."""
        if self.aggregators is None:
            return (self.preferences * losses).sum(), self.preferences
        j = regrets(losses, q)
        # one call per policy: each aggregator holds its own policy's state (e.g. UW's log-variances)
        total = torch.stack([agg.weighted_loss(j[i]) for i, agg in enumerate(self.aggregators)]).sum()
        if any(agg.weights is None for agg in self.aggregators):
            return total, None
        return total, torch.stack([agg.weights for agg in self.aggregators])

    def _aggregate(self, grads: torch.Tensor, losses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Policy p's direction ``[D_p]`` from its ``[M, D_p]`` rows and ``[M]`` losses, stacked ``[P, D_p]``."""
        if self._order is not None:  # primary first (pcd): one copy of the rows, whole D_p-long slices
            grads, losses = grads[self._policy_rows, self._order], losses[self._policy_rows, self._order]
        # a loop over the aggregator calls only: each policy's aggregator has its own state and
        # data-dependent solver (active sets, QPs), which do not batch over policies
        direction = torch.stack([agg(grads[i], losses[i]) for i, agg in enumerate(self.aggregators)])
        if any(agg.weights is None for agg in self.aggregators):
            return direction, None
        weights = torch.stack([agg.weights for agg in self.aggregators])
        return direction, weights if self._order is None else torch.gather(weights, 1, self._unorder)

    # -- temperatures ---------------------------------------------------------------------
    def _alpha_step(self, logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``loss_p = mean_b α_p (−log π_p − H̄)``; each ``log α_p`` sees only policy p's entropy."""
        self.alpha_opt.zero_grad(set_to_none=False)
        losses = (self.log_alpha.exp().unsqueeze(1) * (-logp - self.target_entropy).detach()).mean(-1)
        losses.sum().backward()
        return losses.detach(), guarded_step(self.alpha_opt, [self.log_alpha], self.cfg.grad_clip)

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks, targets, optimizers, temperatures, the preferences in use, the aggregators' states
        and the generator (``preferences``: the config's, which a loading population must share)."""
        return {
            "preferences": self.config_preferences.clone(),
            "assigned_preferences": self.host_preferences.clone(),
            "aggregators": None if self.aggregators is None else [a.state_dict() for a in self.aggregators],
            "generator": self.generator.get_state(),
            **self._sac_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; another population's state raises :class:`IncompatibleState` (one line)."""
        if not torch.equal(state["preferences"], self.config_preferences):
            raise IncompatibleState(
                "the state is of a population with other preferences (agent.preferences / population)"
            )
        self._check_critic_layout(state["critic"])
        self._load_sac_state(state)
        for agg, saved in zip(self.aggregators or [], state["aggregators"] or []):
            agg.load_state_dict(saved)
        self.set_preferences(state.get("assigned_preferences", state["preferences"]))
        self.generator.set_state(state["generator"].cpu())

    def _check_critic_layout(self, saved: dict[str, torch.Tensor]) -> None:
        """One line naming both layouts when a state's critics are not this population's (an older
        MO-SAC held P·M scalar twin critics, one per policy and objective)."""
        own = self.critic.state_dict()
        if {k: tuple(v.shape) for k, v in saved.items()} == {k: tuple(v.shape) for k, v in own.items()}:
            return
        found, expected = _critic_layout(saved), _critic_layout(own)
        hint = ""
        if found.startswith(f"{self.population * self.reward_dim} twin critics with 1 output,"):
            hint = ": the older layout (one scalar critic per policy and objective) cannot be loaded, train again"
        raise IncompatibleState(
            f"the state's critics are {found}; this MO-SAC expects {expected} "
            f"(one per policy, one output per objective){hint}"
        )


def _critic_layout(state: dict[str, torch.Tensor]) -> str:
    """``"P twin critics with M outputs, hidden [h1, h2]"`` from a ``TwinCriticEnsemble`` state."""
    weights = [state[f"weights.{i}"] for i in range(len(state)) if f"weights.{i}" in state]
    if not weights:
        return f"not a twin-critic ensemble (keys {', '.join(sorted(state)[:4])})"
    outputs = weights[-1].shape[-1]
    hidden = [int(w.shape[-1]) for w in weights[:-1]]
    return f"{weights[0].shape[0]} twin critics with {outputs} output{'s' * (outputs != 1)}, hidden {hidden}"


def assignment_cost(q: torch.Tensor) -> torch.Tensor:
    """``C [M, P]`` from the batch-mean Q-values ``q [P, M]``:
    ``C_{m,p} = −(Q̂_{p,m} − mean_p' Q̂_{p',m}) / std_p' Q̂_{p',m}``, lower where policy p is better at
    objective m; each objective standardised over the policies so that none dominates the cost
    (shifting a row leaves the plan unchanged, scaling it does not)."""
    centred = q - q.mean(0, keepdim=True)
    scale = q.std(0, unbiased=False, keepdim=True).clamp_min(torch.finfo(q.dtype).tiny)
    return -(centred / scale).T


def transport_preferences(q: torch.Tensor, tau: float = 0.0, method: str = "ipot") -> tuple[torch.Tensor, torch.Tensor]:
    """MosT's plan ``Γ [M, P]`` (arXiv 2403.04099, Eq. 5; marginals 1/M over objectives, 1/P over
    policies) for :func:`assignment_cost` of ``q``, and the preferences ``ω [P, M]``,
    ``ω_p = Γ[:, p] / Σ_m Γ[m, p]``. Reads the cost and the plan on the host (``transport.solve``)."""
    options = IPOT_OPTIONS if method == "ipot" else {}
    plan = transport.solve(assignment_cost(q), tau=tau, method=method, **options).plan
    return plan, (plan / plan.sum(0, keepdim=True)).T


def regrets(losses: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``[P, M]`` losses the aggregators see: ``J_{p,m} = L_{p,m} + max_{p'} Q̂_{p',m}``, policy p's
    shortfall to the population's best batch-mean Q-value of objective m (the ideal point) plus
    its entropy term. A constant shift per objective: the gradients are those of L."""
    return losses + q.amax(0, keepdim=True)


def build_policy_aggregators(name: str, options: dict[str, Any], preferences: torch.Tensor) -> list[Aggregator] | None:
    """One aggregator per policy (None for ``linear``), each with its policy's preference where the
    method takes one. Bad names, options or options that do not fit the M objectives raise ``ValueError``."""
    import morl.aggregators as aggregators

    if name == LINEAR:
        if options:
            raise ValueError(f"aggregator linear takes no options (the weights are agent.preferences), got {options}")
        return None
    cls = aggregators.aggregator_class(name) if name in aggregators.available() else None
    if cls is None:
        raise ValueError(f"unknown aggregator {name!r}; valid names: {', '.join([LINEAR, *aggregators.available()])}")
    if cls.needs_losses_after_step:
        raise ValueError(
            f"aggregator {name!r} steps on the losses after each update, which MO-SAC's actor does not give"
        )
    pref_key = getattr(cls, "_PREF", None) if hasattr(cls, "_init_preference") else None
    if pref_key in options:
        raise ValueError(f"aggregator option {pref_key} is set per policy from agent.preferences; leave it out")
    out = []
    for w in preferences:
        own = {} if pref_key is None else {pref_key: aggregator_preference(name, w)}
        out.append(aggregators.build(name, **{"check_finite": "skip", **options, **own}))
    _check_fits(out[0], len(preferences[0]))
    return out


def aggregator_preference(name: str, w: torch.Tensor) -> list[float]:
    """The preference option of aggregator ``name`` for a policy of preference ``w``: ``w`` itself,
    for EPO-AL with its zeros raised to ``EPO_FLOOR`` (EPO-AL needs every entry > 0)."""
    return [max(v, EPO_FLOOR) for v in w.tolist()] if name == "epo_al" else w.tolist()


def _check_fits(aggregator: Aggregator, m: int) -> None:
    """Call a copy once on M objectives: an option sized for another M fails here, not mid-run."""
    probe = copy.deepcopy(aggregator)
    probe.check_finite = "raise"
    try:
        probe(torch.eye(m, m + 1, dtype=torch.float64), torch.ones(m, dtype=torch.float64))
    except ValueError as exc:
        raise ValueError(f"aggregator options do not fit {m} objectives: {str(exc).splitlines()[0]}") from None


def _primary_first(w: torch.Tensor) -> torch.Tensor:
    """Objective order with ``argmax w`` (the first of ties) first, the others in their order."""
    top = int(torch.argmax(w))
    return torch.tensor([top, *[i for i in range(len(w)) if i != top]])


def _objective_cosines(gram: torch.Tensor) -> torch.Tensor:
    """``[P]``: the smallest cosine between two objectives' gradients of each policy, from the
    Gramians ``[P, M, M]`` of its rows."""
    norm = gram.diagonal(dim1=1, dim2=2).clamp_min(0).sqrt().clamp_min(1e-30)
    cos = gram / (norm.unsqueeze(2) * norm.unsqueeze(1))
    m = gram.shape[1]
    upper = torch.triu_indices(m, m, 1, device=gram.device)
    return cos[:, upper[0], upper[1]].amin(-1)
