"""Multi-task SAC whose per-task actor gradients go through a ``morl`` aggregator.

One update, top to bottom (batch rows are tasks: ``[T, B, ...]``):

1. critics: per-task twin critics (one batched ensemble) regress on the soft TD target of
   their own task; each task's critic sees only its own rows, so the tasks never interact.
2. actor: each task's actor loss ``mean_b(alpha_t log pi - min_j Q_{j,t})`` is one objective;
   their gradients w.r.t. the shared actor come from ONE vmapped pass
   (``morl.gradients.batched_task_grads``), the aggregator turns the ``[T, D]`` matrix into one
   direction, which is written into ``.grad``, and Adam steps. Aggregators that need no
   gradients (``mean``, the loss weightings) take one backward of their weighted loss instead.
3. temperatures: one ``log_alpha`` per task, each driven by its own task's entropy.
4. targets: Polyak averaging of the critic ensemble.

mtrl's and CAGrad's MT10 learner is reachable through options (docs/mtsac.md): one shared
critic (``critic: shared``, its per-task losses optionally aggregated), no task id in the
network inputs (``task_input: none``), one temperature (``temperature: shared``, optionally
aggregated), mtrl's log-probability clamp and initialisation.

No step reads a value back from the device. An optimizer step that would leave a NaN/inf
anywhere (gradients, Adam's moments, the parameters) is skipped entirely, decided on the
device (``agents/rl/guarded_adam.py``); skipped updates are counted in device tensors
(``nonfinite_updates`` in total, ``nonfinite_streak`` in a row, ``nonfinite_longest`` the
longest such run) that the training loop reads once per log interval.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Literal, get_args

import torch
from torch.func import functional_call

from morl.agents.rl.guarded_adam import guarded_step, make_adam
from morl.agents.rl.networks import INIT_CHOICES, TaskActor, TwinCriticEnsemble, squashed_sample
from morl.agents.rl.sac_state import SACState
from morl.aggregators.base import Aggregator
from morl.gradients import batched_task_grads

Aggregate = Literal["actor", "actor_trunk", "none"]  # which losses go through the aggregator
AGGREGATE_CHOICES: tuple[str, ...] = get_args(Aggregate)
CRITIC_CHOICES = ("per_task", "shared")
TASK_INPUT_CHOICES = ("onehot", "none")
TEMPERATURE_CHOICES = ("per_task", "shared")


@dataclass
class MTSACConfig:
    """Hyperparameters of MT-SAC (the ``agent:`` section of an RL config); defaults = mtrl's MT10 recipe."""

    hidden_sizes: list[int] = field(default_factory=lambda: [400, 400, 400])
    multi_head: bool = False
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005
    init_temperature: float = 1.0
    target_entropy: float | None = None
    batch_size: int = 1280
    buffer_capacity: int = 1_000_000
    aggregate: Aggregate = "actor"
    aggregate_critic: bool = False
    grad_clip: float | None = None
    actor_update_freq: int = 1
    target_update_freq: int = 1
    log_std_min: float = -20.0
    log_std_max: float = 2.0
    compile: bool = False
    # The literature's variants (docs/mtsac.md, "Reproducing mtrl and CAGrad's MT10 runs"):
    critic: Literal["per_task", "shared"] = "per_task"
    task_input: Literal["onehot", "none"] = "onehot"
    temperature: Literal["per_task", "shared"] = "per_task"
    aggregate_temperature: bool = False
    log_prob_clamp: float | None = None
    init: Literal["torch", "xavier"] = "torch"
    # The small-budget recipe's ingredients (docs/mtsac.md, "The CPU recipe"):
    critic_hidden_sizes: list[int] | None = None  # None: hidden_sizes
    critic_layer_norm: bool = False
    actor_layer_norm: bool = False
    reset_every: int | None = None  # updates between re-initialisations of actor, critics and their Adam states

    def validate(self, num_tasks: int) -> None:
        """Raise ``ValueError`` naming the first bad field and what is allowed."""
        if self.aggregate not in AGGREGATE_CHOICES:
            raise ValueError(
                f"agent.aggregate={self.aggregate!r} is not valid; allowed: {', '.join(AGGREGATE_CHOICES)}"
            )
        for name in ("hidden_sizes", "critic_hidden_sizes"):
            sizes = getattr(self, name)
            if (sizes is not None or name == "hidden_sizes") and (not sizes or any(int(h) < 1 for h in sizes)):
                raise ValueError(f"agent.{name} must be a non-empty list of positive ints, got {sizes}")
        if self.reset_every is not None and not self.reset_every >= 1:
            raise ValueError(f"agent.reset_every must be >= 1 (updates) or null, got {self.reset_every}")
        if self.batch_size < num_tasks:
            raise ValueError(f"agent.batch_size={self.batch_size} must be >= the number of tasks ({num_tasks})")
        if self.buffer_capacity < num_tasks:
            raise ValueError(
                f"agent.buffer_capacity={self.buffer_capacity} must be >= the number of tasks ({num_tasks})"
            )
        for name in ("actor_lr", "critic_lr", "alpha_lr", "init_temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"agent.{name} must be > 0, got {getattr(self, name)}")
        if not (0 <= self.gamma <= 1 and 0 < self.tau <= 1):
            raise ValueError(f"agent.gamma must lie in [0, 1] and agent.tau in (0, 1], got {self.gamma} and {self.tau}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"agent.grad_clip must be > 0 or null, got {self.grad_clip}")
        if self.actor_update_freq < 1 or self.target_update_freq < 1:
            raise ValueError("agent.actor_update_freq and agent.target_update_freq must be >= 1")
        if not self.log_std_min < self.log_std_max:
            raise ValueError(f"agent.log_std_min ({self.log_std_min}) must be < agent.log_std_max ({self.log_std_max})")
        self._validate_variants()

    def _validate_variants(self) -> None:
        for name, allowed in (
            ("critic", CRITIC_CHOICES),
            ("task_input", TASK_INPUT_CHOICES),
            ("temperature", TEMPERATURE_CHOICES),
            ("init", INIT_CHOICES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"agent.{name}={getattr(self, name)!r} is not valid; allowed: {', '.join(allowed)}")
        if self.log_prob_clamp is not None and not self.log_prob_clamp > 0:
            raise ValueError(f"agent.log_prob_clamp must be > 0 (mtrl: 1e-6) or null, got {self.log_prob_clamp}")


class MTSAC(SACState):
    """Multi-task SAC: shared task-conditioned actor, per-task twin critics and temperatures.

    ``aggregator`` combines the per-task actor gradients (``cfg.aggregate`` picks which actor
    parameters: all, the trunk only, or none = plain mean loss). A ``check_finite="raise"``
    aggregator is replaced by a copy with ``check_finite="skip"`` (raising needs a host sync);
    its state is never reset between updates, so MoCo's tracking variables follow the
    per-task actor gradients across the whole run.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        num_tasks: int,
        cfg: MTSACConfig,
        aggregator: Aggregator,
        device: torch.device | str,
        seed: int,
    ) -> None:
        cfg.validate(num_tasks)
        self.cfg, self.num_tasks, self.action_dim = cfg, int(num_tasks), int(action_dim)
        self.device, self.seed = torch.device(device), int(seed)
        # task_input "none": the networks never see the one-hot the observations end with
        self._drop = num_tasks if cfg.task_input == "none" else 0
        self.actor, self.critic = self._networks(obs_dim - self._drop, torch.Generator().manual_seed(self.seed))
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        temperatures = num_tasks if cfg.temperature == "per_task" else 1
        self.log_alpha = torch.full(
            (temperatures,), math.log(cfg.init_temperature), device=self.device, requires_grad=True
        )
        self.target_entropy = float(-action_dim if cfg.target_entropy is None else cfg.target_entropy)
        self.actor_opt = make_adam(self.actor.parameters(), cfg.actor_lr)
        self.critic_opt = make_adam(self.critic.parameters(), cfg.critic_lr)
        self.alpha_opt = make_adam([self.log_alpha], cfg.alpha_lr)
        for p in [*self.actor.parameters(), *self.critic.parameters(), self.log_alpha]:
            p.grad = torch.zeros_like(p)  # written in place every update
        # meta tensors (shapes only: the no-sync tests) have no generator; their draws have no values
        self.generator = (
            None if self.device.type == "meta" else torch.Generator(device=self.device).manual_seed(int(seed) + 1)
        )
        self.aggregator = _nonraising(aggregator)
        self.critic_aggregator = _fresh_copy(aggregator) if cfg.aggregate_critic else None
        self.temperature_aggregator = _fresh_copy(aggregator) if cfg.aggregate_temperature else None
        self._init_counters(self.device)
        self._task_eye = torch.eye(num_tasks, device=self.device)
        self._actor_names = [n for n, _ in self.actor.named_parameters()]
        trunk = set(self.actor.trunk_parameter_names())
        self._aggregated = [n in trunk or cfg.aggregate == "actor" for n in self._actor_names]
        # an aggregator that needs no gradients (mean, loss weightings) over the whole actor has the
        # gradient of its weighted loss as direction: one backward, no [T, D] matrix
        self._one_backward = cfg.aggregate == "none" or (cfg.aggregate == "actor" and not self.aggregator.needs_grads)
        # a shared critic gives the aggregator its [T, D] rows only if the aggregator needs gradients
        self._shared_critic_rows = (
            cfg.critic == "shared" and self.critic_aggregator is not None and self.critic_aggregator.needs_grads
        )
        self.kernels = _kernels(self, cfg.compile)

    def _networks(self, net_obs: int, gen: torch.Generator) -> tuple[TaskActor, TwinCriticEnsemble]:
        """A freshly initialised actor and critic ensemble, drawn from ``gen`` (actor first)."""
        cfg = self.cfg
        hidden = [int(h) for h in cfg.hidden_sizes]
        actor = TaskActor(
            net_obs,
            self.action_dim,
            self.num_tasks,
            hidden,
            cfg.multi_head,
            cfg.log_std_min,
            cfg.log_std_max,
            generator=gen,
            init=cfg.init,
            layer_norm=cfg.actor_layer_norm,
        )
        # a shared critic is an ensemble of one "task" whose weights broadcast over the task axis
        critics = self.num_tasks if cfg.critic == "per_task" else 1
        critic_hidden = [int(h) for h in (cfg.critic_hidden_sizes or hidden)]
        critic = TwinCriticEnsemble(
            net_obs,
            self.action_dim,
            critics,
            critic_hidden,
            generator=gen,
            init=cfg.init,
            layer_norm=cfg.critic_layer_norm,
        )
        return actor.to(self.device), critic.to(self.device)

    def reset_networks(self, step: int) -> None:
        """Re-initialise actor, critics and targets in place and clear their Adam states (BRO's
        resets, arXiv 2405.16158, Sec. 4); drawn from (seed, step), so a resumed run resets alike."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + int(step))
        actor, critic = self._networks(self.actor.trunk[0].shape[0], gen)
        with torch.no_grad():
            for net, fresh in ((self.actor, actor), (self.critic, critic), (self.critic_target, critic)):
                for p, q in zip(net.parameters(), fresh.parameters()):
                    p.copy_(q)
        for opt in (self.actor_opt, self.critic_opt):
            opt.state.clear()
            opt.param_bound = None

    # -- acting ---------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Actions ``[N, A]`` in ``[-1, 1]`` for observations ``[N, obs_dim]`` ending with the task one-hot."""
        obs = obs.to(self.device, torch.float32)
        mean, log_std = self.actor(self._net_input(obs), obs[..., -self.num_tasks :])
        if deterministic:
            return torch.tanh(mean)
        eps = torch.randn(mean.shape, device=self.device, generator=self.generator)
        return squashed_sample(mean, log_std, eps)[0]

    def _net_input(self, obs: torch.Tensor) -> torch.Tensor:
        """What the networks see: the observation, without its one-hot columns if ``task_input: none``."""
        return obs[..., : obs.shape[-1] - self._drop] if self._drop else obs

    def _alpha(self) -> torch.Tensor:
        """The temperature of each task ``[T]`` (one shared value repeated with ``temperature: shared``)."""
        return self.log_alpha.detach().exp().expand(self.num_tasks)

    def _noise(self, obs: torch.Tensor) -> torch.Tensor:
        """Standard normal ``[T, B, A]`` for the reparameterised actions of a ``[T, B, ...]`` batch."""
        return torch.randn(*obs.shape[:2], self.action_dim, device=self.device, generator=self.generator)

    # -- one update -----------------------------------------------------------------------
    def update(self, batch: dict[str, torch.Tensor], step: int, diagnostics: bool = True) -> dict[str, torch.Tensor]:
        """One SAC update from a task-grouped batch ``[T, B, ...]``; returns detached device tensors.

        ``diagnostics=False`` leaves out the gradient-conflict statistics but ``grad_norm_task``
        (which aggregators of per-task gradients compute anyway); aggregators that need no
        gradients (``mean``, the loss weightings) then skip the per-task gradients altogether.
        The update itself never depends on ``diagnostics``.
        """
        if batch["obs"].dim() != 3 or batch["obs"].shape[0] != self.num_tasks:
            raise ValueError(f"batch['obs'] must be [T={self.num_tasks}, B, obs_dim], got {tuple(batch['obs'].shape)}")
        if self.cfg.reset_every and step > 0 and step % self.cfg.reset_every == 0:
            self.reset_networks(step)
        obs, next_obs = self._net_input(batch["obs"]), self._net_input(batch["next_obs"])
        transitions = (obs, batch["action"], batch["reward"], next_obs, batch["terminated"])
        alpha, eps_next = self._alpha(), self._noise(obs)
        critic_loss, ok = self._critic_step(*transitions, eps_next, alpha)
        if self.critic_aggregator is not None and self.critic_aggregator.needs_losses_after_step:
            # FAMO (Alg. 1): the losses after the step on the SAME batch, as its authors' MT10 agent
            with torch.no_grad():
                self.critic_aggregator.update(self.kernels.critic_losses(*transitions, eps_next, alpha))
        metrics = {"critic_loss": critic_loss.detach()}
        if step % self.cfg.actor_update_freq == 0:
            logp, actor_ok, actor_metrics = self._actor_step(obs, alpha, diagnostics)
            alpha_loss, alpha_ok = self._alpha_step(logp)
            ok = ok & actor_ok & alpha_ok
            metrics.update(actor_metrics, entropy=-logp.mean(-1), alpha_loss=alpha_loss)
        if step % self.cfg.target_update_freq == 0:
            with torch.no_grad():
                torch._foreach_lerp_(
                    list(self.critic_target.parameters()), list(self.critic.parameters()), self.cfg.tau
                )
        return {**metrics, "alpha": self._alpha().clone(), **self._count_nonfinite(ok)}

    # -- critics --------------------------------------------------------------------------
    def _critic_losses(self, obs, action, reward, next_obs, terminated, eps_next, alpha) -> torch.Tensor:
        """Per-task critic losses ``[T]``: the sum over the twins of the mean squared soft TD error."""
        target = self._td_target(reward, next_obs, terminated, eps_next, alpha)
        q = self.critic(obs, action)  # [T, 2, B]
        return (q - target.unsqueeze(1)).pow(2).mean(-1).sum(1)

    def _td_target(self, reward, next_obs, terminated, eps_next, alpha) -> torch.Tensor:
        """The soft TD target ``[T, B]`` of every task (no gradient)."""
        with torch.no_grad():
            mean, log_std = self.actor(next_obs, self._task_eye.unsqueeze(1))
            next_action, next_logp = squashed_sample(mean, log_std, eps_next, self.cfg.log_prob_clamp)
            q_next = self.critic_target(next_obs, next_action).amin(1)
            return reward + self.cfg.gamma * (1.0 - terminated) * (q_next - alpha.unsqueeze(1) * next_logp)

    def _critic_step(
        self, obs, action, reward, next_obs, terminated, eps_next, alpha
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the critics; returns their per-task losses ``[T]`` and whether the step was taken."""
        self.critic_opt.zero_grad(set_to_none=False)
        params = list(self.critic.parameters())
        if self._shared_critic_rows:
            losses = self._shared_critic_grads(
                obs, action, self._td_target(reward, next_obs, terminated, eps_next, alpha)
            )
        else:
            losses = self.kernels.critic_losses(obs, action, reward, next_obs, terminated, eps_next, alpha)
            self._critic_backward(losses, params)
        return losses, guarded_step(self.critic_opt, params, self.cfg.grad_clip)

    def _critic_backward(self, losses: torch.Tensor, params: list[torch.Tensor]) -> None:
        # Per-task critics: one backward of the sum gives every critic its own gradient; an
        # aggregator that needs no gradients scales critic t by T w_t, what its [T, D] rows would
        # give (one backward too). A shared critic descends the mean loss (mtrl's mean over the batch).
        per_task, agg = self.cfg.critic == "per_task", self.critic_aggregator
        if agg is not None and not agg.needs_grads:
            ((self.num_tasks if per_task else 1) * agg.weighted_loss(losses)).backward()
        elif agg is not None:  # per-task critics: the shared one with such an aggregator is _shared_critic_grads
            losses.sum().backward()
            self._aggregate_critic_grads(params, losses.detach())
        else:
            (losses.sum() if per_task else losses.mean()).backward()

    def _aggregate_critic_grads(self, params: list[torch.Tensor], losses: torch.Tensor) -> None:
        # Row t holds task t's gradient in critic t's block and zeros elsewhere (block diagonal).
        t = self.num_tasks
        idx = torch.arange(t, device=self.device)
        rows = []
        for p in params:
            block = torch.zeros(t, *p.shape, device=p.device, dtype=p.dtype)  # [T, T, num_q, ...]
            block[idx, idx] = p.grad
            rows.append(block.reshape(t, -1))
        direction = self.critic_aggregator(torch.cat(rows, dim=1), losses) * t  # the sum of own-task gradients for mean
        _write_grads(params, direction)

    def _shared_critic_grads(self, obs, action, target) -> torch.Tensor:
        """Per-task losses ``[T]`` of the shared critic; their ``[T, D]`` gradients go through the
        aggregator into ``.grad``, as CAGrad's MT10 run fed its critic to CAGrad."""
        params = dict(self.critic.named_parameters())
        # one vmapped pass over the task slices: each task backpropagates its own B rows only, so the
        # T gradients cost about one backward of the whole batch
        losses, matrix = batched_task_grads(self._critic_task_loss, params, obs, action, target)
        _write_grads(list(params.values()), self.critic_aggregator(matrix, losses.detach()))
        return losses

    def _critic_task_loss(self, params: dict[str, torch.Tensor], obs, action, target) -> torch.Tensor:
        """One task's loss on its slice ``[B, ...]`` for the shared critic (weights ``[1, 2, in, out]``)."""
        depth, norms = len(self.critic.weights), len(self.critic.norms)
        q = TwinCriticEnsemble.q_values(
            [params[f"weights.{i}"] for i in range(depth)],
            [params[f"biases.{i}"] for i in range(depth)],
            obs,
            action,
            [params[f"norms.{i}"] for i in range(norms)],
        )  # [1, 2, B]
        return (q - target).pow(2).mean(-1).sum()

    # -- actor ----------------------------------------------------------------------------
    def _actor_step(
        self, obs: torch.Tensor, alpha: torch.Tensor, diagnostics: bool
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """One step of the actor; returns log π ``[T, B]``, whether the step was taken, and its metrics."""
        eps = self._noise(obs)
        params = list(self.actor.parameters())
        self.actor_opt.zero_grad(set_to_none=False)
        finite_rows = None
        if self._one_backward:
            losses, logp = self._actor_backward(obs, eps, alpha)
            metrics = {}
            if self.cfg.aggregate != "none" and diagnostics:  # the per-task gradients feed the statistics only
                metrics = _conflict_stats(self.kernels.actor_task_grads(obs, eps, alpha)[1], _flat_grad(params))
        else:
            losses, grads, logp = self.kernels.actor_task_grads(obs, eps, alpha)
            picked, direction = self._aggregate_actor_grads(params, grads, losses)
            # the pairwise statistics cost extra passes over [T, D]: on diagnostic updates only
            metrics = _conflict_stats(picked, direction) if diagnostics else {"grad_norm_task": picked.norm(dim=1)}
            # a "skip" aggregator returns zeros for non-finite rows: skip the step rather than take it
            finite_rows = torch.isfinite(metrics["grad_norm_task"]).all()
        if self.cfg.aggregate != "none" and self.aggregator.weights is not None:
            metrics["agg_weights"] = self.aggregator.weights.detach()
        ok = guarded_step(self.actor_opt, params, self.cfg.grad_clip, finite_rows)
        return logp, ok, {"actor_loss": losses.detach(), **metrics}

    def _actor_backward(self, obs, eps, alpha) -> tuple[torch.Tensor, torch.Tensor]:
        """One backward of the aggregator's weighted actor loss (the mean with ``aggregate: none``);
        returns the per-task losses ``[T]`` and log π ``[T, B]``."""
        mean, log_std = self.actor(obs, self._task_eye.unsqueeze(1))
        act, logp = squashed_sample(mean, log_std, eps, self.cfg.log_prob_clamp)
        # detached critic weights: the actor loss must not leave gradients on the critics
        critic = [[p.detach() for p in ps] for ps in (self.critic.weights, self.critic.biases, self.critic.norms)]
        q = TwinCriticEnsemble.q_values(critic[0], critic[1], obs, act, critic[2]).amin(1)
        losses = (alpha.unsqueeze(1) * logp - q).mean(-1)
        (losses.mean() if self.cfg.aggregate == "none" else self.aggregator.weighted_loss(losses)).backward()
        return losses, logp.detach()

    def _actor_task_loss(self, params: dict[str, torch.Tensor], obs, eps, onehot, alpha) -> torch.Tensor:
        """Task ``t``'s actor loss on its slice ``[B, ...]`` (``params`` holds task t's critic weights)."""
        actor_params = {n: params[n] for n in self._actor_names}
        mean, log_std = functional_call(self.actor, actor_params, (obs, onehot))
        act, logp = squashed_sample(mean, log_std, eps, self.cfg.log_prob_clamp)
        depth, norms = len(self.critic.weights), len(self.critic.norms)
        q = TwinCriticEnsemble.q_values(
            [params[f"critic.w{i}"] for i in range(depth)],
            [params[f"critic.b{i}"] for i in range(depth)],
            obs,
            act,
            [params[f"critic.n{i}"] for i in range(norms)],
        )
        # log pi comes back as aux: the temperatures need it and it saves a second actor forward
        return (alpha * logp - q.amin(0)).mean(), logp.detach()

    def _actor_task_grads(self, obs, eps, alpha) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-task actor losses ``[T]``, gradients ``[T, D]`` and log π ``[T, B]`` in one vmapped pass."""
        params = dict(self.actor.named_parameters())
        critic = self.critic.per_task_views()
        if self.cfg.critic == "shared":  # every task slice sees the same critic: expanded views, no copy
            critic = {n: w.expand(self.num_tasks, *w.shape[1:]) for n, w in critic.items()}
        return batched_task_grads(
            self._actor_task_loss, params, obs, eps, self._task_eye, alpha, per_task_params=critic, has_aux=True
        )

    def _aggregate_actor_grads(
        self, params, grads: torch.Tensor, losses: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Aggregate the chosen columns of the ``[T, D]`` matrix into ``.grad``; returns them and the direction."""
        sizes = [p.numel() for p in params]
        cols = torch.split(grads, sizes, dim=1)
        picked = grads if all(self._aggregated) else torch.cat([c for c, a in zip(cols, self._aggregated) if a], dim=1)
        direction = self.aggregator(picked, losses.detach())
        agg_parts = iter(torch.split(direction, [s for s, a in zip(sizes, self._aggregated) if a]))
        for p, c, a in zip(params, cols, self._aggregated):
            # parameters outside the aggregation (heads with aggregate="actor_trunk") get the mean-loss gradient
            p.grad.copy_((next(agg_parts) if a else c.mean(0)).view_as(p))
        return picked, direction

    # -- temperatures ---------------------------------------------------------------------
    def _alpha_step(self, logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the temperatures; returns their per-task losses ``[T]`` and whether the step was taken."""
        # mtrl's form: loss_t = mean_b alpha_t (-log pi - target entropy); each log_alpha_t sees only
        # task t. One shared log_alpha descends the mean over tasks (mtrl's mean over the batch).
        self.alpha_opt.zero_grad(set_to_none=False)
        alpha = self.log_alpha.exp().expand(self.num_tasks)
        losses = (alpha.unsqueeze(1) * (-logp - self.target_entropy).detach()).mean(-1)
        shared = self.cfg.temperature == "shared"
        (losses.mean() if shared else losses.sum()).backward()
        if self.temperature_aggregator is not None:
            self._aggregate_temperature_grad(losses.detach(), shared)
        return losses.detach(), guarded_step(self.alpha_opt, [self.log_alpha], self.cfg.grad_clip)

    def _aggregate_temperature_grad(self, losses: torch.Tensor, shared: bool) -> None:
        # d loss_t / d log_alpha = alpha c_t = loss_t: task t's gradient row is its loss, on the one
        # shared column ([T, 1]) or on its own column (diagonal [T, T], scaled by T like the critics).
        rows = losses.unsqueeze(1) if shared else torch.diag(losses)
        direction = self.temperature_aggregator(rows, losses)
        self.log_alpha.grad.copy_(direction if shared else direction * self.num_tasks)

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks, targets, optimizers, temperatures, aggregator state and the generator state."""
        return {
            "aggregator": self.aggregator.state_dict(),
            "critic_aggregator": None if self.critic_aggregator is None else self.critic_aggregator.state_dict(),
            "temperature_aggregator": (
                None if self.temperature_aggregator is None else self.temperature_aggregator.state_dict()
            ),
            "generator": self.generator.get_state(),
            **self._sac_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_sac_state(state)
        self.aggregator.load_state_dict(state["aggregator"])
        if self.critic_aggregator is not None and state.get("critic_aggregator") is not None:
            self.critic_aggregator.load_state_dict(state["critic_aggregator"])
        if self.temperature_aggregator is not None and state.get("temperature_aggregator") is not None:
            self.temperature_aggregator.load_state_dict(state["temperature_aggregator"])
        self.generator.set_state(state["generator"].cpu() if hasattr(state["generator"], "cpu") else state["generator"])


def _fresh_copy(aggregator: Aggregator) -> Aggregator:
    """A second, independent instance (own state) of the aggregator, for the critic or temperature losses."""
    quiet = _nonraising(copy.deepcopy(aggregator))
    quiet.reset()
    return quiet


def _nonraising(aggregator: Aggregator) -> Aggregator:
    if not isinstance(aggregator, Aggregator):
        raise TypeError(f"aggregator must be a morl Aggregator (morl.build(name)), got {type(aggregator).__name__}")
    if aggregator.check_finite != "raise":
        return aggregator
    quiet = copy.deepcopy(aggregator)
    quiet.check_finite = "skip"
    return quiet


def _kernels(agent: MTSAC, compile: bool) -> SimpleNamespace:
    """The update's two pure tensor functions: the one place where ``cfg.compile`` applies torch.compile."""
    wrap = torch.compile if compile else (lambda fn: fn)
    return SimpleNamespace(critic_losses=wrap(agent._critic_losses), actor_task_grads=wrap(agent._actor_task_grads))


def _write_grads(params: list[torch.Tensor], direction: torch.Tensor) -> None:
    """Copy a flat ``[D]`` direction into the parameters' ``.grad`` tensors, in place."""
    for p, d in zip(params, torch.split(direction, [p.numel() for p in params])):
        p.grad.copy_(d.view_as(p))


def _flat_grad(params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in params])


def _conflict_stats(grads: torch.Tensor, direction: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-task gradient norms and pairwise-cosine conflict statistics of a ``[T, D]`` matrix."""
    norms = grads.norm(dim=1)
    stats = {
        "grad_norm_task": norms,
        "grad_norm_pre": grads.mean(0).norm(),
        "grad_norm_post": direction.norm(),
    }
    t = grads.shape[0]
    if t > 1:
        cos = (grads @ grads.T) / (norms.unsqueeze(0) * norms.unsqueeze(1)).clamp_min(1e-30)
        # integer indices, not a boolean mask: mask indexing runs nonzero(), a host sync on a GPU
        upper = torch.triu_indices(t, t, 1, device=grads.device)
        pairs = cos[upper[0], upper[1]]
        stats.update(grad_cos_min=pairs.min(), grad_cos_mean=pairs.mean(), grad_conflicts=(pairs < 0).sum())
    return stats
