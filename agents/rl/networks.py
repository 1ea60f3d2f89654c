"""The MT-SAC networks: a task-conditioned squashed-Gaussian actor and per-task twin critics.

Shapes follow one convention everywhere: a leading ``...`` of batch dimensions, features last.
The update feeds task-grouped batches ``[T, B, obs_dim]``; ``act`` feeds flat ``[N, obs_dim]``;
``torch.func.vmap`` feeds one task slice ``[B, obs_dim]``. Every forward is written with
broadcasting ``matmul`` so that the same code serves all three.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _uniform_(t: torch.Tensor, fan_in: int, gen: torch.Generator | None) -> None:
    # nn.Linear's default scale U(-1/sqrt(fan_in), 1/sqrt(fan_in)), drawn from our generator
    # so that construction is reproducible from the agent's seed alone.
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        t.uniform_(-bound, bound, generator=gen)


class TaskActor(nn.Module):
    """Shared MLP actor on the observation (which ends with the task one-hot).

    The output layer gives the mean and the raw log-std of a tanh-squashed Gaussian over
    ``action_dim`` actions. With ``multi_head`` it has one output head per task: all heads
    are computed in one matmul (``[H, T * 2A]``) and the task's head is picked by a one-hot
    mask, so the same code runs on any batch layout and under ``vmap``.
    """

    def __init__(self, obs_dim: int, action_dim: int, num_tasks: int, hidden_sizes: list[int],
                 multi_head: bool = False, log_std_min: float = -20.0, log_std_max: float = 2.0,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        if not hidden_sizes:
            raise ValueError("hidden_sizes must name at least one hidden layer, e.g. [400, 400, 400]")
        self.action_dim, self.num_tasks, self.multi_head = action_dim, num_tasks, multi_head
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        sizes = [obs_dim, *hidden_sizes]
        self.trunk = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            self.trunk.append(nn.Parameter(torch.empty(fan_in, fan_out)))
            self.trunk.append(nn.Parameter(torch.empty(fan_out)))
        heads = num_tasks if multi_head else 1
        self.head_weight = nn.Parameter(torch.empty(sizes[-1], heads * 2 * action_dim))
        self.head_bias = nn.Parameter(torch.empty(heads * 2 * action_dim))
        for i in range(0, len(self.trunk), 2):
            _uniform_(self.trunk[i], sizes[i // 2], generator)
            _uniform_(self.trunk[i + 1], sizes[i // 2], generator)
        _uniform_(self.head_weight, sizes[-1], generator)
        _uniform_(self.head_bias, sizes[-1], generator)

    def trunk_parameter_names(self) -> list[str]:
        return [f"trunk.{i}" for i in range(len(self.trunk))]

    def forward(self, obs: torch.Tensor, task_onehot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [..., obs_dim]``, ``task_onehot`` broadcastable to ``[..., T]`` -> (mean, log_std) ``[..., A]``."""
        x = obs.reshape(-1, obs.shape[-1])  # one flat batch: addmm fuses the bias into the matmul
        for i in range(0, len(self.trunk), 2):
            x = torch.relu(torch.addmm(self.trunk[i + 1], x, self.trunk[i]))
        out = torch.addmm(self.head_bias, x, self.head_weight).reshape(*obs.shape[:-1], -1)
        if self.multi_head:
            out = out.unflatten(-1, (self.num_tasks, 2 * self.action_dim))
            out = (out * task_onehot.unsqueeze(-1)).sum(-2)
        mean, raw_log_std = out.chunk(2, dim=-1)
        # tanh-rescaled log-std bounds (as in mtrl / pytorch_sac) keep the gradient alive at the limits.
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw_log_std) + 1)
        return mean, log_std


def squashed_sample(mean: torch.Tensor, log_std: torch.Tensor, eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reparameterised tanh-Gaussian sample ``a = tanh(mean + std * eps)`` and its log-density ``[...]``."""
    u = mean + log_std.exp() * eps
    gauss = -0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
    # log(1 - tanh(u)^2) written stably: 2 (log 2 - u - softplus(-2u)).
    jacobian = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
    return torch.tanh(u), (gauss - jacobian).sum(-1)


class TwinCriticEnsemble(nn.Module):
    """``num_q`` (=2) Q-networks per task, ``T * num_q`` MLPs evaluated as one batched matmul.

    Weights are stacked ``[T, num_q, in, out]`` (task axis first, so task t's twins are one
    contiguous slice). ``forward(obs, action)`` with task-grouped inputs ``[T, B, ...]``
    returns ``[T, num_q, B]``; with one task slice ``[B, ...]`` and that task's weights
    ``[num_q, in, out]`` (as ``vmap`` over tasks sees them) it returns ``[num_q, B]``.
    No Python loop over tasks or twins.
    """

    def __init__(self, obs_dim: int, action_dim: int, num_tasks: int, hidden_sizes: list[int],
                 num_q: int = 2, generator: torch.Generator | None = None) -> None:
        super().__init__()
        sizes = [obs_dim + action_dim, *hidden_sizes, 1]
        self.num_q, self.num_tasks = num_q, num_tasks
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = nn.Parameter(torch.empty(num_tasks, num_q, fan_in, fan_out))
            b = nn.Parameter(torch.empty(num_tasks, num_q, 1, fan_out))
            _uniform_(w, fan_in, generator)
            _uniform_(b, fan_in, generator)
            self.weights.append(w)
            self.biases.append(b)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.q_values([*self.weights], [*self.biases], obs, action)

    @staticmethod
    def q_values(weights: list[torch.Tensor], biases: list[torch.Tensor], obs: torch.Tensor,
                 action: torch.Tensor) -> torch.Tensor:
        """Q-values with explicit weights (``[(T,) num_q, in, out]``) for any matching input layout."""
        # [(T,) 1, B, in] @ [(T,) num_q, in, out] broadcasts to one batched matmul over all members.
        x = torch.cat([obs, action], dim=-1).unsqueeze(-3)
        last = len(weights) - 1
        for i, (w, b) in enumerate(zip(weights, biases)):
            x = torch.matmul(x, w) + b
            if i < last:
                x = torch.relu(x)
        return x.squeeze(-1)

    def per_task_views(self) -> dict[str, torch.Tensor]:
        """The stacked weights by name (task axis first), as per-task inputs for ``vmap`` over tasks."""
        views = {f"critic.w{i}": w for i, w in enumerate(self.weights)}
        views.update({f"critic.b{i}": b for i, b in enumerate(self.biases)})
        return views
