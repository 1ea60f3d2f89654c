"""Multi-task SAC whose per-task actor gradients go through a ``morl`` aggregator.

One update, top to bottom (batch rows are tasks: ``[T, B, ...]``):

1. critics: per-task twin critics (one batched ensemble) regress on the soft TD target of
   their own task; each task's critic sees only its own rows, so the tasks never interact.
2. actor: each task's actor loss ``mean_b(alpha_t log pi - min_j Q_{j,t})`` is one objective;
   their gradients w.r.t. the shared actor come from ONE vmapped pass
   (``morl.gradients.batched_task_grads``), the aggregator turns the ``[T, D]`` matrix into one
   direction, which is written into ``.grad`` (``mean`` reproduces the plain mean-loss
   gradient) and Adam steps.
3. temperatures: one ``log_alpha`` per task, each driven by its own task's entropy.
4. targets: Polyak averaging of the critic ensemble.

mtrl's and CAGrad's MT10 learner is reachable through options (docs/mtsac.md): one shared
critic (``critic: shared``, its per-task losses optionally aggregated), no task id in the
network inputs (``task_input: none``), one temperature (``temperature: shared``, optionally
aggregated), mtrl's log-probability clamp and initialisation.

No step reads a value back from the device. An optimizer step that would leave a NaN/inf
anywhere (gradients, Adam's moments, the parameters) is skipped entirely, decided on the
device (see ``_guarded_step``); skipped updates are counted in device tensors
(``nonfinite_updates`` in total, ``nonfinite_streak`` in a row, ``nonfinite_longest`` the
longest such run) that the training loop reads once per log interval.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import torch
from torch.func import functional_call

from morl.agents.rl.networks import INIT_CHOICES, TaskActor, TwinCriticEnsemble, squashed_sample
from morl.aggregators.base import Aggregator
from morl.aggregators.famo import FAMO
from morl.aggregators.mean import Mean
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

    def validate(self, num_tasks: int) -> None:
        """Raise ``ValueError`` naming the first bad field and what is allowed."""
        if self.aggregate not in AGGREGATE_CHOICES:
            raise ValueError(f"agent.aggregate={self.aggregate!r} is not valid; allowed: {', '.join(AGGREGATE_CHOICES)}")
        if not self.hidden_sizes or any(int(h) < 1 for h in self.hidden_sizes):
            raise ValueError(f"agent.hidden_sizes must be a non-empty list of positive ints, got {self.hidden_sizes}")
        if self.batch_size < num_tasks:
            raise ValueError(f"agent.batch_size={self.batch_size} must be >= the number of tasks ({num_tasks})")
        if self.buffer_capacity < num_tasks:
            raise ValueError(f"agent.buffer_capacity={self.buffer_capacity} must be >= the number of tasks ({num_tasks})")
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
        for name, allowed in (("critic", CRITIC_CHOICES), ("task_input", TASK_INPUT_CHOICES),
                              ("temperature", TEMPERATURE_CHOICES), ("init", INIT_CHOICES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"agent.{name}={getattr(self, name)!r} is not valid; allowed: {', '.join(allowed)}")
        if self.log_prob_clamp is not None and not self.log_prob_clamp > 0:
            raise ValueError(f"agent.log_prob_clamp must be > 0 (mtrl: 1e-6) or null, got {self.log_prob_clamp}")


class MTSAC:
    """Multi-task SAC: shared task-conditioned actor, per-task twin critics and temperatures.

    ``aggregator`` combines the per-task actor gradients (``cfg.aggregate`` picks which actor
    parameters: all, the trunk only, or none = plain mean loss). A ``check_finite="raise"``
    aggregator is replaced by a copy with ``check_finite="skip"`` (raising needs a host sync);
    its state is never reset between updates, so MoCo's tracking variables follow the
    per-task actor gradients across the whole run.
    """

    def __init__(self, obs_dim: int, action_dim: int, num_tasks: int, cfg: MTSACConfig,
                 aggregator: Aggregator, device: torch.device | str, seed: int) -> None:
        cfg.validate(num_tasks)
        self.cfg, self.num_tasks, self.action_dim = cfg, int(num_tasks), int(action_dim)
        self.device = torch.device(device)
        init_gen = torch.Generator().manual_seed(int(seed))
        hidden = [int(h) for h in cfg.hidden_sizes]
        # task_input "none": the networks never see the one-hot the observations end with
        self._drop = num_tasks if cfg.task_input == "none" else 0
        net_obs = obs_dim - self._drop
        self.actor = TaskActor(net_obs, action_dim, num_tasks, hidden, cfg.multi_head, cfg.log_std_min,
                               cfg.log_std_max, generator=init_gen, init=cfg.init).to(self.device)
        # a shared critic is an ensemble of one "task" whose weights broadcast over the task axis
        critics = num_tasks if cfg.critic == "per_task" else 1
        self.critic = TwinCriticEnsemble(net_obs, action_dim, critics, hidden, generator=init_gen,
                                         init=cfg.init).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        temperatures = num_tasks if cfg.temperature == "per_task" else 1
        self.log_alpha = torch.full((temperatures,), math.log(cfg.init_temperature), device=self.device,
                                    requires_grad=True)
        self.target_entropy = float(-action_dim if cfg.target_entropy is None else cfg.target_entropy)
        self.actor_opt = _adam(self.actor.parameters(), cfg.actor_lr)
        self.critic_opt = _adam(self.critic.parameters(), cfg.critic_lr)
        self.alpha_opt = _adam([self.log_alpha], cfg.alpha_lr)
        for p in [*self.actor.parameters(), *self.critic.parameters(), self.log_alpha]:
            p.grad = torch.zeros_like(p)  # written in place every update
        # meta tensors (shapes only: the no-sync tests) have no generator; their draws have no values
        self.generator = None if self.device.type == "meta" else torch.Generator(device=self.device).manual_seed(int(seed) + 1)
        self.aggregator = _nonraising(aggregator)
        self.critic_aggregator = _fresh_copy(aggregator) if cfg.aggregate_critic else None
        self.temperature_aggregator = _fresh_copy(aggregator) if cfg.aggregate_temperature else None
        self._shared_critic_grads = (cfg.critic == "shared" and self.critic_aggregator is not None
                                     and self.critic_aggregator.needs_grads)
        self.nonfinite_updates = torch.zeros((), dtype=torch.int64, device=self.device)
        self.nonfinite_streak = torch.zeros((), dtype=torch.int64, device=self.device)
        self.nonfinite_longest = torch.zeros((), dtype=torch.int64, device=self.device)
        self._task_eye = torch.eye(num_tasks, device=self.device)
        self._actor_names = [n for n, _ in self.actor.named_parameters()]
        trunk = set(self.actor.trunk_parameter_names())
        self._aggregated = [n in trunk or cfg.aggregate == "actor" for n in self._actor_names]
        # mean over all actor parameters is linear: one backward of the mean loss gives its direction;
        # a loss weighting's direction is the gradient of its weighted loss: one backward too
        self._plain_mean = isinstance(self.aggregator, Mean) and cfg.aggregate == "actor"
        self._loss_weighted = not self.aggregator.needs_grads and cfg.aggregate == "actor"
        self._critic_losses = torch.compile(self._critic_losses_eager) if cfg.compile else self._critic_losses_eager
        self._actor_task_grads = torch.compile(self._actor_task_grads_eager) if cfg.compile else self._actor_task_grads_eager

    # -- acting ---------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Actions ``[N, A]`` in ``[-1, 1]`` for observations ``[N, obs_dim]`` ending with the task one-hot."""
        obs = obs.to(self.device, torch.float32)
        mean, log_std = self.actor(self._net_input(obs), obs[..., -self.num_tasks:])
        if deterministic:
            return torch.tanh(mean)
        eps = torch.randn(mean.shape, device=self.device, generator=self.generator)
        return squashed_sample(mean, log_std, eps)[0]

    def _net_input(self, obs: torch.Tensor) -> torch.Tensor:
        """What the networks see: the observation, without its one-hot columns if ``task_input: none``."""
        return obs[..., :obs.shape[-1] - self._drop] if self._drop else obs

    def _alpha(self) -> torch.Tensor:
        """The temperature of each task ``[T]`` (one shared value repeated with ``temperature: shared``)."""
        return self.log_alpha.detach().exp().expand(self.num_tasks)

    # -- one update -----------------------------------------------------------------------
    def update(self, batch: dict[str, torch.Tensor], step: int, diagnostics: bool = True) -> dict[str, torch.Tensor]:
        """One SAC update from a task-grouped batch ``[T, B, ...]``; returns detached device tensors.

        ``diagnostics=False`` lets ``mean`` and the loss weightings (``needs_grads`` False: UW,
        DWA, FAMO, GLS, STCH) skip the per-task gradients (their direction is the gradient of
        the mean / weighted loss, one backward): the gradient-conflict statistics are then left
        out of the returned metrics. Other aggregators need the per-task gradients anyway and
        always report them. The update itself never depends on ``diagnostics``.
        """
        obs, action, next_obs = batch["obs"], batch["action"], batch["next_obs"]
        if obs.dim() != 3 or obs.shape[0] != self.num_tasks:
            raise ValueError(f"batch['obs'] must be [T={self.num_tasks}, B, obs_dim], got {tuple(obs.shape)}")
        obs, next_obs = self._net_input(obs), self._net_input(next_obs)
        alpha = self._alpha()
        out: dict[str, torch.Tensor] = {}
        eps_next = torch.randn(*obs.shape[:2], self.action_dim, device=self.device, generator=self.generator)
        if self._shared_critic_grads:
            target = self._td_target(batch["reward"], next_obs, batch["terminated"], eps_next, alpha)
            critic_loss, ok = self._shared_critic_step(obs, action, target)
        else:
            critic_loss = self._critic_losses(obs, action, batch["reward"], next_obs, batch["terminated"], eps_next, alpha)
            ok = self._critic_step(critic_loss)
        if isinstance(self.critic_aggregator, FAMO):
            # FAMO's logit step (Alg. 1) compares the losses before and after the step on the
            # SAME batch, as the authors' MT10 agent does: one more critic forward, no backward
            with torch.no_grad():
                after = self._critic_losses(obs, action, batch["reward"], next_obs, batch["terminated"], eps_next, alpha)
            self.critic_aggregator.update(after)
        out["critic_loss"] = critic_loss.detach()
        if step % self.cfg.actor_update_freq == 0:
            ok = ok & self._actor_and_alpha_step(obs, alpha, out, diagnostics)
        if step % self.cfg.target_update_freq == 0:
            with torch.no_grad():
                target, online = list(self.critic_target.parameters()), list(self.critic.parameters())
                torch._foreach_lerp_(target, online, self.cfg.tau)
        self._count_nonfinite(ok)
        out["alpha"] = self._alpha().clone()
        out["nonfinite_updates"] = self.nonfinite_updates.clone()
        out["nonfinite_streak"] = self.nonfinite_streak.clone()
        return out

    def _count_nonfinite(self, ok: torch.Tensor) -> None:
        # Device-side counters: the loop reads them at its log/checkpoint points, not per update.
        bad = (~ok).to(torch.int64)
        self.nonfinite_updates += bad
        self.nonfinite_streak.add_(bad).mul_(bad)  # +1 on a skipped update, 0 on a taken one
        torch.maximum(self.nonfinite_longest, self.nonfinite_streak, out=self.nonfinite_longest)

    def _critic_losses_eager(self, obs, action, reward, next_obs, terminated, eps_next, alpha) -> torch.Tensor:
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

    def _shared_critic_step(self, obs, action, target) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-task losses ``[T]`` of the shared critic and their ``[T, D_critic]`` gradients through the
        aggregator, as CAGrad's MT10 run fed its critic to CAGrad; returns (losses, step taken)."""
        self.critic_opt.zero_grad(set_to_none=False)
        params = dict(self.critic.named_parameters())
        # one vmapped pass over the task slices: each task backpropagates its own B rows only, so the
        # T gradients cost about one backward of the whole batch
        losses, matrix = batched_task_grads(self._critic_task_loss, params, obs, action, target)
        direction = self.critic_aggregator(matrix, losses.detach())  # mean: the mean loss's gradient
        for p, d in zip(params.values(), torch.split(direction, [p.numel() for p in params.values()])):
            p.grad.copy_(d.view_as(p))
        return losses, _guarded_step(self.critic_opt, list(params.values()), self.cfg.grad_clip)

    def _critic_task_loss(self, params: dict[str, torch.Tensor], obs, action, target) -> torch.Tensor:
        """One task's loss on its slice ``[B, ...]`` for the shared critic (weights ``[1, 2, in, out]``)."""
        depth = len(self.critic.weights)
        q = TwinCriticEnsemble.q_values([params[f"weights.{i}"] for i in range(depth)],
                                        [params[f"biases.{i}"] for i in range(depth)], obs, action)  # [1, 2, B]
        return (q - target).pow(2).mean(-1).sum()

    def _critic_step(self, losses: torch.Tensor) -> torch.Tensor:
        self.critic_opt.zero_grad(set_to_none=False)
        params = list(self.critic.parameters())
        per_task = self.cfg.critic == "per_task"
        # Per-task critics: one backward of the sum gives every critic its own gradient, and a loss
        # weighting scales critic t by T w_t, what its [T, D] path gives (one backward too).
        # A shared critic descends the mean loss (mtrl's mean over the whole batch); its
        # aggregated per-task gradients come from _shared_critic_step instead.
        scale = self.num_tasks if per_task else 1
        if self.critic_aggregator is not None and not self.critic_aggregator.needs_grads:
            (scale * self.critic_aggregator.weighted_loss(losses)).backward()
        elif not per_task:
            losses.mean().backward()
        else:
            losses.sum().backward()
            if self.critic_aggregator is not None:
                self._aggregate_critic_grads(params, losses.detach())
        return _guarded_step(self.critic_opt, params, self.cfg.grad_clip)

    def _aggregate_critic_grads(self, params: list[torch.Tensor], losses: torch.Tensor) -> None:
        # Row t holds task t's gradient in critic t's block and zeros elsewhere (block diagonal).
        t = self.num_tasks
        idx = torch.arange(t, device=self.device)
        rows = []
        for p in params:
            block = torch.zeros(t, *p.shape, device=p.device, dtype=p.dtype)  # [T, T, num_q, ...]
            block[idx, idx] = p.grad
            rows.append(block.reshape(t, -1))
        direction = self.critic_aggregator(torch.cat(rows, dim=1), losses) * t  # sum of own-task gradients for mean
        for p, d in zip(params, torch.split(direction, [p.numel() for p in params])):
            p.grad.copy_(d.view_as(p))

    def _actor_task_loss(self, params: dict[str, torch.Tensor], obs, eps, onehot, alpha) -> torch.Tensor:
        """Task ``t``'s actor loss on its slice ``[B, ...]`` (``params`` holds task t's critic weights)."""
        actor_params = {n: params[n] for n in self._actor_names}
        mean, log_std = functional_call(self.actor, actor_params, (obs, onehot))
        act, logp = squashed_sample(mean, log_std, eps, self.cfg.log_prob_clamp)
        depth = len(self.critic.weights)
        q = TwinCriticEnsemble.q_values([params[f"critic.w{i}"] for i in range(depth)],
                                        [params[f"critic.b{i}"] for i in range(depth)], obs, act)
        # log pi comes back as aux: the temperatures need it and it saves a second actor forward
        return (alpha * logp - q.amin(0)).mean(), logp.detach()

    def _actor_task_grads_eager(self, obs, eps, alpha) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-task actor losses ``[T]``, gradients ``[T, D]`` and log pi ``[T, B]`` in one vmapped pass."""
        params = dict(self.actor.named_parameters())
        critic = self.critic.per_task_views()
        if self.cfg.critic == "shared":  # every task slice sees the same critic: expanded views, no copy
            critic = {n: w.expand(self.num_tasks, *w.shape[1:]) for n, w in critic.items()}
        return batched_task_grads(self._actor_task_loss, params, obs, eps, self._task_eye, alpha,
                                  per_task_params=critic, has_aux=True)

    def _actor_and_alpha_step(self, obs: torch.Tensor, alpha: torch.Tensor, out: dict,
                              diagnostics: bool) -> torch.Tensor:
        eps = torch.randn(*obs.shape[:2], self.action_dim, device=self.device, generator=self.generator)
        params = list(self.actor.parameters())
        self.actor_opt.zero_grad(set_to_none=False)
        if self.cfg.aggregate == "none" or self._plain_mean or self._loss_weighted:
            logp, losses = self._plain_actor_backward(obs, eps, alpha)
            if self._plain_mean or self._loss_weighted:
                out["agg_weights"] = (self.aggregator.weights.detach() if self._loss_weighted else
                                      torch.full((self.num_tasks,), 1.0 / self.num_tasks, device=self.device))
                if diagnostics:  # per-task gradients for the conflict statistics only; the step is unchanged
                    task_grads = self._actor_task_grads(obs, eps, alpha)[1]
                    out.update(_conflict_stats(task_grads, _flat_grad(params)))
            ok = _guarded_step(self.actor_opt, params, self.cfg.grad_clip)
        else:
            losses, grads, logp = self._actor_task_grads(obs, eps, alpha)
            self._write_aggregated(params, grads, losses, out)
            # a "skip" aggregator returns zeros for non-finite rows: skip the step rather than take it
            finite_rows = torch.isfinite(out["grad_norm_task"]).all()
            ok = _guarded_step(self.actor_opt, params, self.cfg.grad_clip, finite_rows)
        out["actor_loss"] = losses.detach()
        out["entropy"] = -logp.mean(-1)
        return ok & self._alpha_step(logp, out)

    def _plain_actor_backward(self, obs, eps, alpha) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(obs, self._task_eye.unsqueeze(1))
        act, logp = squashed_sample(mean, log_std, eps, self.cfg.log_prob_clamp)
        # detached critic weights: the actor loss must not leave gradients on the critics
        q = TwinCriticEnsemble.q_values([w.detach() for w in self.critic.weights],
                                        [b.detach() for b in self.critic.biases], obs, act).amin(1)
        losses = (alpha.unsqueeze(1) * logp - q).mean(-1)
        (self.aggregator.weighted_loss(losses) if self._loss_weighted else losses.mean()).backward()
        return logp.detach(), losses

    def _write_aggregated(self, params, grads: torch.Tensor, losses: torch.Tensor, out: dict) -> None:
        """Aggregate the chosen columns of the ``[T, D]`` matrix and write ``.grad`` (mean = mean-loss gradient)."""
        sizes = [p.numel() for p in params]
        cols = torch.split(grads, sizes, dim=1)
        everything = all(self._aggregated)
        picked = grads if everything else torch.cat([c for c, a in zip(cols, self._aggregated) if a], dim=1)
        direction = self.aggregator(picked, losses.detach())
        out.update(_conflict_stats(picked, direction))
        if self.aggregator.weights is not None:
            out["agg_weights"] = self.aggregator.weights.detach()
        agg_parts = iter(torch.split(direction, [s for s, a in zip(sizes, self._aggregated) if a]))
        for p, c, a in zip(params, cols, self._aggregated):
            # parameters outside the aggregation (heads with aggregate="actor_trunk") get the mean-loss gradient
            g = next(agg_parts) if a else c.mean(0)
            p.grad.copy_(g.view_as(p))

    def _alpha_step(self, logp: torch.Tensor, out: dict) -> torch.Tensor:
        # mtrl's form: loss_t = mean_b alpha_t (-log pi - target entropy); each log_alpha_t sees only
        # task t. One shared log_alpha descends the mean over tasks (mtrl's mean over the batch).
        self.alpha_opt.zero_grad(set_to_none=False)
        alpha = self.log_alpha.exp().expand(self.num_tasks)
        losses = (alpha.unsqueeze(1) * (-logp - self.target_entropy).detach()).mean(-1)
        shared = self.cfg.temperature == "shared"
        (losses.mean() if shared else losses.sum()).backward()
        if self.temperature_aggregator is not None:
            self._aggregate_temperature_grad(losses.detach(), shared)
        ok = _guarded_step(self.alpha_opt, [self.log_alpha], self.cfg.grad_clip)
        out["alpha_loss"] = losses.detach()
        return ok

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
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
            "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(), "aggregator": self.aggregator.state_dict(),
            "critic_aggregator": None if self.critic_aggregator is None else self.critic_aggregator.state_dict(),
            "temperature_aggregator": (None if self.temperature_aggregator is None
                                       else self.temperature_aggregator.state_dict()),
            "generator": self.generator.get_state(), "nonfinite_updates": self.nonfinite_updates.clone(),
            "nonfinite_streak": self.nonfinite_streak.clone(), "nonfinite_longest": self.nonfinite_longest.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        for opt in (self.actor_opt, self.critic_opt, self.alpha_opt):
            opt.param_bound = None  # new parameters: _guarded_step measures max|θ| again
        self.aggregator.load_state_dict(state["aggregator"])
        if self.critic_aggregator is not None and state.get("critic_aggregator") is not None:
            self.critic_aggregator.load_state_dict(state["critic_aggregator"])
        if self.temperature_aggregator is not None and state.get("temperature_aggregator") is not None:
            self.temperature_aggregator.load_state_dict(state["temperature_aggregator"])
        self.generator.set_state(state["generator"].cpu() if hasattr(state["generator"], "cpu") else state["generator"])
        self.nonfinite_updates.copy_(state["nonfinite_updates"])
        # checkpoints from before the streak counters: no streak known
        self.nonfinite_streak.copy_(state.get("nonfinite_streak", torch.zeros((), dtype=torch.int64)))
        self.nonfinite_longest.copy_(state.get("nonfinite_longest", torch.zeros((), dtype=torch.int64)))


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


def _adam(params, lr: float) -> torch.optim.Adam:
    # The fused kernel is ~8x faster than the per-tensor loop on CPU and honours `found_inf`
    # (skip the whole step, moments and step count included) without a host sync.
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError):  # a device/dtype without the fused kernel
        return torch.optim.Adam(params, lr=lr, foreach=True)


@torch.no_grad()  # the bound below is carried from step to step: with grad it would chain a graph forever
def _guarded_step(opt: torch.optim.Adam, params: list[torch.Tensor], max_norm: float | None,
                  ok: torch.Tensor | None = None) -> torch.Tensor:
    """Clip, then step unless the step could leave a NaN/inf behind (or ``ok`` is False).

    Returns ``ok`` on the device; no host sync. A skipped step is skipped entirely: the
    parameters, Adam's moments and its step count stay exactly as they were (a step on zeroed
    gradients would still move the parameters through the momentum and decay the moments).
    The parameters after the step are checked without computing them: finite gradients with a
    finite squared norm keep the moments finite, and a running upper bound on max|θ| plus the
    largest possible Adam step (``_adam_step_bound``) must stay finite. That bound costs O(1) per
    step (an exact max over the MT10 critics would cost ~2% of an update): it is measured at the
    first step (and the first after ``load_state_dict``) and raised by the step bound, rounded
    up, after every taken step. It only refuses steps after about fmax / (2 lr bound) taken
    steps: never for a sane learning rate, after ~20 steps for lr = 1e36.
    """
    grads = [p.grad for p in params]
    finite, _ = _guard_and_clip(grads, max_norm, zero_bad=False)
    ok = finite if ok is None else finite & ok
    reach = 2.0 * opt.param_groups[0]["lr"] * _adam_step_bound(opt)  # 2: rounding margin
    if not reach < torch.finfo(params[0].dtype).max:
        return ok & False  # known on the host: even the optimizer's own scalars would overflow
    bound = getattr(opt, "param_bound", None)
    if bound is None:
        bound = torch.stack(torch._foreach_norm(params, math.inf)).amax()
    after = torch.nextafter(bound + reach, torch.full_like(bound, math.inf))  # rounded up: still a bound
    ok = ok & torch.isfinite(after)
    if opt.defaults.get("fused"):
        # the fused kernel skips everything, step count included, when found_inf is 1
        opt.found_inf = (~ok).to(torch.float32)
        opt.step()
    else:
        ok = _step_or_restore(opt, params, ok)
    opt.param_bound = torch.where(ok, after, bound)
    return ok


def _adam_step_bound(opt: torch.optim.Adam) -> float:
    """The least upper bound on ``|Δθ| / lr`` of an Adam step, for every coordinate and step count.

    Zero-initialised moments over the taken steps' gradients g_1..g_t and Cauchy-Schwarz give
    |m_t| <= (1-β1) sqrt((1-r^t)/(1-r)) sqrt(v_t/(1-β2)) with r = β1²/β2, so Adam's step
    lr |m_t|/(1-β1^t) / (sqrt(v_t/(1-β2^t)) + ε) is at most
    lr (1-β1)/sqrt((1-β2)(1-r)) · sqrt((1-r^t)(1-β2^t))/(1-β1^t), and the last factor is <= 1
    because r^t + β2^t >= 2 β1^t (AM-GM). Equality is approached for g_i ∝ (β2/β1)^i and large t:
    about 7.27 lr for the default betas. Without β1² < β2 there is no bound (inf).
    """
    b1, b2 = opt.defaults["betas"]
    if not b1 * b1 < b2 < 1:
        return math.inf
    return (1.0 - b1) / math.sqrt((1.0 - b2) * (1.0 - b1 * b1 / b2))


@torch.no_grad()
def _step_or_restore(opt: torch.optim.Optimizer, params: list[torch.Tensor], ok: torch.Tensor) -> torch.Tensor:
    """Step, then put parameters and optimizer state back wherever ``ok`` (or the result) is not finite.

    For optimizers without the fused kernel's ``found_inf`` (a device/dtype without it): this
    path copies the parameters and the state, which the fused path avoids. State created by
    this very step (Adam's first step) is restored to zeros, which is how Adam starts.
    """
    saved = [p.detach().clone() for p in params]
    state_before = [{k: v.clone() for k, v in opt.state[p].items() if torch.is_tensor(v)} for p in params]
    for g in (p.grad for p in params):  # no NaN inside the optimizer even when the step is thrown away
        torch.where(ok, g, torch.zeros((), dtype=g.dtype, device=g.device), out=g)
    opt.step()
    state_after = [{k: v for k, v in opt.state[p].items() if torch.is_tensor(v)} for p in params]
    tensors = [*params, *(v for st in state_after for v in st.values())]
    ok = ok & torch.isfinite(torch.stack(torch._foreach_norm(tensors, math.inf)).amax())
    for p, old in zip(params, saved):
        p.copy_(torch.where(ok, p, old))
    for before, after in zip(state_before, state_after):
        for key, new in after.items():
            new.copy_(torch.where(ok, new, before.get(key, torch.zeros_like(new))))
    return ok


def _guard_and_clip(grads: list[torch.Tensor], max_norm: float | None,
                    zero_bad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Whether all gradients are finite, and their total norm; clips to ``max_norm``; no host sync.

    ``ok`` also requires the squared norm of the (clipped) gradient to be finite: then every
    g² is finite and so is Adam's second moment (a finite norm alone can hide an overflowing
    g² when the norm is accumulated in higher precision). With ``zero_bad`` non-finite
    gradients are replaced by zeros (for optimizers that cannot skip).
    """
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    post = norm
    if max_norm is not None:
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        post = norm * coef
    ok = torch.isfinite(norm) & torch.isfinite(post * post)
    if zero_bad:
        for g in grads:
            torch.where(ok, g, torch.zeros((), dtype=g.dtype, device=g.device), out=g)
    if max_norm is not None:
        torch._foreach_mul_(grads, torch.where(ok, coef, torch.zeros_like(coef)))
    return ok, norm


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
