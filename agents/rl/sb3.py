"""stable-baselines3 adapter: multi-task SAC whose per-task actor gradients go through a morl aggregator.

``MultiTaskSAC`` is SB3's ``SAC`` with two changes, both in :meth:`MultiTaskSAC.train`:

* one entropy temperature per task (``log_alpha [K]``, per-task target entropy), the
  "disentangled alpha" of mtrl / garage; the temperature of a replay sample is its task's;
* the actor loss is split by task, ``L_k = mean over the batch's task-k samples of
  (alpha_k log pi(a|s) - min_j Q_j(s, a))``; the ``[K, D]`` matrix of their gradients w.r.t.
  the actor parameters (one batched backward, :func:`morl.gradients.per_task_grads`) goes
  through the aggregator, and its direction is what Adam steps on. With ``mean`` this is the
  gradient of ``mean_k L_k``. Loss weightings (``needs_grads`` False) skip the per-task
  gradients: one backward of their weighted loss ``Σ_k w_k L_k`` gives the same direction.

A task absent from a batch (SB3 samples uniformly) is left out of the aggregation unless the
aggregator keeps per-task state (:meth:`MultiTaskSAC._present_rows`). gSDE (``use_sde=True``)
resamples its noise as SB3's SAC does, and ``train/ent_coef_loss`` is logged under SB3's key.

The critic update is SB3's (with each sample's own task temperature in the soft target). The
task of a sample is read from the one-hot at the end of its observation, which every env of
``envs`` carries. :class:`SB3VecEnv` exposes an ``envs.MultiTaskVecEnv`` as an SB3 ``VecEnv``
(``MultiTaskSAC`` wraps one automatically).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th
from stable_baselines3 import SAC
from stable_baselines3.common.logger import HumanOutputFormat, Logger
from stable_baselines3.common.utils import polyak_update
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices
from torch.nn import functional as F

import morl
from morl.gradients import per_task_grads, write_grads

#: What SB3VecEnv reads of a multi-task vector env (envs.MultiTaskVecEnv has them). Checked by
#: shape rather than by class: learners do not import environments (the runner hands them one).
_VEC_ENV_ATTRS = (
    "num_envs",
    "num_tasks",
    "task_ids",
    "single_observation_space",
    "single_action_space",
    "reset",
    "step",
    "close",
)


#: Aggregator state that its owner starts afresh when K changes (a warm start: the solvers' last
#: solution ``w_prev``, Nash-MTL's ``alpha``): such an aggregator can be given a subset of the tasks.
_RESTARTS_WHEN_K_CHANGES = frozenset({"w_prev", "alpha"})


def is_multitask_vec_env(env) -> bool:
    """True for an ``envs.MultiTaskVecEnv`` or anything with its interface."""
    return not isinstance(env, VecEnv) and all(hasattr(env, a) for a in _VEC_ENV_ATTRS)


class SB3VecEnv(VecEnv):
    """A :class:`envs.MultiTaskVecEnv` seen through SB3's ``VecEnv`` API.

    Episode ends carry SB3's keys: ``terminal_observation`` (the env's ``final_obs``),
    ``TimeLimit.truncated``, ``episode`` (``r``, ``l``) and ``is_success`` (success at any step),
    so SB3's ``rollout/ep_rew_mean`` and ``rollout/success_rate`` work unchanged.
    """

    def __init__(self, env) -> None:
        if not is_multitask_vec_env(env):
            raise ValueError(f"SB3VecEnv wraps an envs.MultiTaskVecEnv (from envs.make_env), got {type(env).__name__}")
        if getattr(env, "reward_dim", None) is not None:
            raise ValueError(f"SB3VecEnv needs a scalar reward; {env!r} returns {env.reward_dim} objectives per step")
        self.env = env
        self._actions: np.ndarray | None = None
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)

    def reset(self) -> np.ndarray:
        seed = self._seeds[0]  # VecEnv.seed(s) stores s + i per sub-env; our env derives all from one seed
        obs, _ = self.env.reset(seed=seed)
        self._reset_seeds()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self):
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        done = terminated | truncated
        infos: list[dict[str, Any]] = [{"success": float(s)} for s in info["success"]]
        for i in np.flatnonzero(done):
            infos[i].update(
                task=int(self.env.task_ids[i]),
                terminal_observation=info["final_obs"][i],
                is_success=bool(info["episode_success"][i] > 0.5),
                episode={"r": float(info["episode_return"][i]), "l": int(info["episode_length"][i]), "t": 0.0},
            )
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return obs, reward, done, infos

    def close(self) -> None:
        self.env.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [getattr(self.env, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class, indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]


class _AggregatorState:
    """Lets SB3's save/load (which calls ``load_state_dict(state, strict=...)``) carry the
    aggregator's state (MoCo's tracking variables, multipliers, generators)."""

    def __init__(self, aggregator: morl.Aggregator) -> None:
        self.aggregator = aggregator

    def state_dict(self) -> dict[str, Any]:
        return self.aggregator.state_dict()

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        self.aggregator.load_state_dict(state)


def folderless_logger(verbose: int = 0) -> Logger:
    """An SB3 logger that writes to the terminal (``verbose >= 1``) or nowhere, and creates no folder.

    SB3's default, ``configure(None, ...)``, makes an empty ``$TMPDIR/SB3-<date>`` folder on every
    ``learn()`` even when it writes no file; runs would leave one behind each time.
    """
    return Logger(folder=None, output_formats=[HumanOutputFormat(sys.stdout)] if verbose >= 1 else [])


class MultiTaskSAC(SAC):
    """SB3 SAC with per-task temperatures and per-task actor losses aggregated by a morl aggregator.

    ``aggregator``: a name of :func:`morl.aggregators.build` (options in ``aggregator_options``).
    ``num_tasks``: defaults to the env's. ``target_entropy``: ``"auto"`` (``-action_dim`` for every
    task), one float, or K floats. ``ent_coef``: ``"auto"`` / ``"auto_<init>"`` (learned per task,
    initial value ``<init>``, default 1.0) or a fixed float shared by all tasks. Other arguments are
    SAC's. ``env`` may be an ``envs.MultiTaskVecEnv`` (wrapped in :class:`SB3VecEnv`).
    """

    def __init__(
        self,
        policy: Any,
        env: Any,
        aggregator: str = "cagrad",
        aggregator_options: dict[str, Any] | None = None,
        num_tasks: int | None = None,
        target_entropy: str | float | Sequence[float] = "auto",
        max_actor_grad_norm: float | None = None,
        **sac_kwargs: Any,
    ) -> None:
        inner = env.env if isinstance(env, SB3VecEnv) else env
        self.num_tasks = num_tasks if num_tasks is not None else getattr(inner, "num_tasks", None)
        init_setup = sac_kwargs.get("_init_setup_model", True)
        if self.num_tasks is None and init_setup:
            raise ValueError(
                "num_tasks is required when env is not an envs.MultiTaskVecEnv (it sets the one-hot width)"
            )
        self.task_names = list(getattr(inner, "task_names", [])) or [str(k) for k in range(self.num_tasks or 0)]
        self.aggregator_name = aggregator
        self.aggregator_options = dict(aggregator_options or {})
        if init_setup:
            morl.aggregators.build(aggregator, **self.aggregator_options)  # fail before building anything else
        self.max_actor_grad_norm = max_actor_grad_norm
        per_task = not isinstance(target_entropy, (str, int, float))
        if per_task and init_setup:
            target_entropy = [float(v) for v in np.asarray(target_entropy, np.float64).reshape(-1)]
            if len(target_entropy) != self.num_tasks:
                raise ValueError(
                    f"target_entropy has {len(target_entropy)} entries; give one float, 'auto' or {self.num_tasks} (one per task)"
                )
        super().__init__(policy, env, target_entropy="auto" if per_task else target_entropy, **sac_kwargs)
        self.task_target_entropy = target_entropy

    @staticmethod
    def _wrap_env(env, verbose: int = 0, monitor_wrapper: bool = True) -> VecEnv:
        if is_multitask_vec_env(env):
            env = SB3VecEnv(env)
        return SAC._wrap_env(env, verbose, monitor_wrapper)

    def _setup_learn(
        self, total_timesteps, callback=None, reset_num_timesteps=True, tb_log_name="run", progress_bar=False
    ):
        # With tensorboard_log, SB3's own logger writes into that folder; without it, SB3 would make a stray tempdir.
        if not self._custom_logger and self.tensorboard_log is None:
            self.set_logger(folderless_logger(self.verbose))
        return super()._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)

    def _setup_model(self) -> None:
        super()._setup_model()
        k = self.num_tasks
        if self.observation_space.shape[-1] <= k:
            raise ValueError(
                f"observations have {self.observation_space.shape[-1]} entries, too few to end with a {k}-task one-hot"
            )
        self.aggregator = morl.aggregators.build(self.aggregator_name, **self.aggregator_options)
        self.task_success_buffers = [deque(maxlen=self._stats_window_size) for _ in range(k)]
        self.aggregator_state = _AggregatorState(self.aggregator)
        if self.ent_coef_optimizer is not None:
            init = float(self.log_ent_coef.detach().exp()[0])
            self.log_ent_coef = th.full((k,), float(np.log(init)), device=self.device, requires_grad=True)
            self.ent_coef_optimizer = th.optim.Adam([self.log_ent_coef], lr=self.lr_schedule(1))

    def _target_entropy_tensor(self) -> th.Tensor:
        value = getattr(self, "task_target_entropy", "auto")
        if isinstance(value, str):
            value = self.target_entropy  # SAC resolved "auto" to -action_dim
        values = np.broadcast_to(np.asarray(value, np.float32), (self.num_tasks,))
        return th.as_tensor(values.copy(), device=self.device)

    def _update_info_buffer(self, infos: list[dict[str, Any]], dones: np.ndarray | None = None) -> None:
        super()._update_info_buffer(infos, dones)
        for info in infos:
            if "is_success" in info and "task" in info:
                self.task_success_buffers[info["task"]].append(info["is_success"])

    def dump_logs(self) -> None:
        """SB3's logs plus ``rollout/success_rate/<task>`` (training episodes, last ``stats_window_size``)."""
        for name, buffer in zip(self.task_names, self.task_success_buffers):
            if buffer:
                self.logger.record(f"rollout/success_rate/{name}", float(np.mean(buffer)))
        super().dump_logs()

    def _excluded_save_params(self) -> list[str]:
        return super()._excluded_save_params() + ["aggregator", "aggregator_state", "_task_weights"]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        state_dicts, variables = super()._get_torch_save_params()
        return state_dicts + ["aggregator_state"], variables

    # -- the update -----------------------------------------------------------------------
    def train(self, gradient_steps: int, batch_size: int = 64) -> None:
        """``gradient_steps`` SAC updates; per-task alphas, aggregated actor (see the module docstring)."""
        self.policy.set_training_mode(True)
        optimizers = [self.actor.optimizer, self.critic.optimizer]
        if self.ent_coef_optimizer is not None:
            optimizers.append(self.ent_coef_optimizer)
        self._update_learning_rate(optimizers)
        target_entropy = self._target_entropy_tensor()
        actor_params = [p for p in self.actor.parameters() if p.requires_grad]
        logs: dict[str, list[th.Tensor]] = {
            "actor_loss": [],
            "critic_loss": [],
            "alpha": [],
            "alpha_loss": [],
            "ent_coef_loss": [],
        }

        for gradient_step in range(gradient_steps):
            data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            task = data.observations[:, -self.num_tasks :].argmax(dim=1)
            samples = th.bincount(task, minlength=self.num_tasks)  # [K]; 0 for a task absent from the batch
            counts = samples.clamp_min(1).to(data.rewards.dtype)
            if self.use_sde:
                # as SB3's SAC: a new gSDE exploration matrix per gradient step (log_std has changed,
                # and the previous matrix's graph was freed by the previous backward)
                self.actor.reset_noise()

            def per_task_mean(x: th.Tensor) -> th.Tensor:
                return th.zeros(self.num_tasks, dtype=x.dtype, device=x.device).index_add_(0, task, x) / counts

            actions_pi, log_prob = self.actor.action_log_prob(data.observations)
            log_prob = log_prob.reshape(-1)

            if self.ent_coef_optimizer is not None:
                alpha = self.log_ent_coef.detach().exp()  # [K]
                # Each temperature sees only its task's samples: sum of per-task means.
                alpha_loss = -per_task_mean(self.log_ent_coef[task] * (log_prob + target_entropy[task]).detach())
                self.ent_coef_optimizer.zero_grad()
                alpha_loss.sum().backward()
                self.ent_coef_optimizer.step()
                logs["alpha_loss"].append(alpha_loss.detach())
                # SB3's train/ent_coef_loss is the batch mean of the loss; here: the mean over the
                # batch's tasks of their per-task means (identical for one task)
                logs["ent_coef_loss"].append(alpha_loss.detach().sum() / (samples > 0).sum())
            else:
                alpha = self.ent_coef_tensor.expand(self.num_tasks)
            alpha_s = alpha[task].unsqueeze(1)  # [B, 1] temperature of each sample's task
            logs["alpha"].append(alpha)

            critic_loss = self._critic_loss(data, alpha_s)
            self.critic.optimizer.zero_grad()
            critic_loss.backward()
            self.critic.optimizer.step()
            logs["critic_loss"].append(critic_loss.detach())

            q_pi = th.cat(self.critic(data.observations, actions_pi), dim=1).min(dim=1).values
            task_losses = per_task_mean(alpha_s.squeeze(1) * log_prob - q_pi)  # [K] objectives
            self._actor_step(task_losses, actor_params, samples)
            logs["actor_loss"].append(task_losses.detach())

            if gradient_step % self.target_update_interval == 0:
                polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)
                polyak_update(self.batch_norm_stats, self.batch_norm_stats_target, 1.0)

        self._n_updates += gradient_steps
        self._record(logs)

    def _critic_loss(self, data, alpha_s: th.Tensor) -> th.Tensor:
        discounts = data.discounts if data.discounts is not None else self.gamma
        with th.no_grad():
            next_actions, next_log_prob = self.actor.action_log_prob(data.next_observations)
            next_q = (
                th.cat(self.critic_target(data.next_observations, next_actions), dim=1).min(dim=1, keepdim=True).values
            )
            next_q = next_q - alpha_s * next_log_prob.reshape(-1, 1)
            target_q = data.rewards + (1 - data.dones) * discounts * next_q
        current_q = self.critic(data.observations, data.actions)
        return 0.5 * sum(F.mse_loss(q, target_q) for q in current_q)

    def _actor_step(self, task_losses: th.Tensor, params: list[th.Tensor], samples: th.Tensor) -> None:
        self.actor.optimizer.zero_grad()
        rows = self._present_rows(samples)
        losses = task_losses if rows is None else task_losses[rows]
        if not self.aggregator.needs_grads:
            # a loss weighting (UW, DWA, FAMO, GLS, STCH): its direction is the gradient of its
            # weighted loss, so one plain backward replaces the [K, D] per-task gradients
            self.aggregator.weighted_loss(losses).backward(inputs=params)
        else:
            grads = per_task_grads(losses, params)  # [K, D], one batched backward
            direction = self.aggregator(grads, losses.detach())
            write_grads(params, direction, accumulate=False)
        self._task_weights = self._weights_per_task(rows)
        if self.max_actor_grad_norm is not None:
            th.nn.utils.clip_grad_norm_(params, self.max_actor_grad_norm)
        self.actor.optimizer.step()

    def _present_rows(self, samples: th.Tensor) -> th.Tensor | None:
        """The tasks with samples in the batch, or None to aggregate all K rows.

        A task absent from SB3's uniformly sampled batch has loss 0 and a zero gradient row, and a
        zero row collapses min-norm methods (MGDA's direction becomes 0) and GLS's geometric mean:
        aggregators without per-task state get the present tasks' rows only. Aggregators that
        keep per-task state (MoCo's tracked gradients, GradNorm's weights, ...) need the same K
        rows at every call and get all K. Costs one device->host read per gradient step.
        """
        if self._per_task_state() or bool((samples > 0).all()):
            return None
        return th.nonzero(samples > 0).squeeze(1)

    def _per_task_state(self) -> bool:
        return any(name not in _RESTARTS_WHEN_K_CHANGES for _, name, _ in self.aggregator._state_buffers())

    def _weights_per_task(self, rows: th.Tensor | None) -> th.Tensor | None:
        """The aggregator's weights of this step as ``[K]`` (0 for the tasks left out), if it has weights."""
        weights = getattr(self.aggregator, "weights", None)
        if weights is None or rows is None:
            return weights
        if weights.shape != rows.shape:
            return None
        return th.zeros(self.num_tasks, dtype=weights.dtype, device=weights.device).index_copy_(
            0, rows, weights.detach()
        )

    def _record(self, logs: dict[str, list[th.Tensor]]) -> None:
        # One device->host transfer per train() call, not one per gradient step.
        means = {key: th.stack(values).mean(dim=0).cpu().numpy() for key, values in logs.items() if values}
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/critic_loss", float(means["critic_loss"]))
        self.logger.record("train/actor_loss", float(means["actor_loss"].mean()))
        self.logger.record("train/ent_coef", float(means["alpha"].mean()))
        if "ent_coef_loss" in means:
            self.logger.record("train/ent_coef_loss", float(means["ent_coef_loss"]))
        weights = getattr(self, "_task_weights", None)
        weights = None if weights is None else weights.detach().cpu().numpy()
        for k, name in enumerate(self.task_names):
            self.logger.record(f"train/alpha/{name}", float(means["alpha"][k]))
            self.logger.record(f"train/actor_loss/{name}", float(means["actor_loss"][k]))
            if "alpha_loss" in means:
                self.logger.record(f"train/alpha_loss/{name}", float(means["alpha_loss"][k]))
            if weights is not None and weights.shape == (self.num_tasks,):
                self.logger.record(f"train/agg_weight/{name}", float(weights[k]))
