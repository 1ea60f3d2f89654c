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

INIT_CHOICES = ("torch", "xavier")


def _uniform_(t: torch.Tensor, fan_in: int, gen: torch.Generator | None) -> None:
    # nn.Linear's default scale U(-1/sqrt(fan_in), 1/sqrt(fan_in)), drawn from our generator
    # so that construction is reproducible from the agent's seed alone.
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        t.uniform_(-bound, bound, generator=gen)


def _init_layer_(
    weight: torch.Tensor, bias: torch.Tensor, fan_in: int, fan_out: int, init: str, gen: torch.Generator | None
) -> None:
    """One linear layer (``weight [..., fan_in, fan_out]``, any stacking in front).

    ``torch``: nn.Linear's default for weight and bias. ``xavier``: mtrl's ``weight_init``
    (Xavier/Glorot uniform weights U(±sqrt(6 / (fan_in + fan_out))), zero biases), applied to
    each stacked matrix separately, as mtrl applies it to each head of its multi-head layer.
    """
    if init == "torch":
        _uniform_(weight, fan_in, gen)
        _uniform_(bias, fan_in, gen)
        return
    if init != "xavier":
        raise ValueError(f"init={init!r} is not valid; allowed: {', '.join(INIT_CHOICES)}")
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        weight.uniform_(-bound, bound, generator=gen)
        bias.zero_()


def layer_norm(x: torch.Tensor, gain: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """LayerNorm over the features (Ba et al., arXiv 1607.06450) with a gain and shift that may be
    stacked per ensemble member (``[..., 1, H]``), which ``nn.functional.layer_norm`` cannot take."""
    return nn.functional.layer_norm(x, x.shape[-1:]) * gain + shift


def _norm_parameters(shapes: list[list[int]]) -> nn.ParameterList:
    """Gain (ones) and shift (zeros) of each normalised layer, alternating, as nn.LayerNorm starts."""
    params = nn.ParameterList()
    for shape in shapes:
        params.append(nn.Parameter(torch.ones(shape)))
        params.append(nn.Parameter(torch.zeros(shape)))
    return params


class TaskActor(nn.Module):
    """Shared MLP actor on the observation (which ends with the task one-hot).

    The output layer gives the mean and the raw log-std of a tanh-squashed Gaussian over
    ``action_dim`` actions. With ``multi_head`` it has one output head per task: all heads
    are computed in one matmul (``[H, T * 2A]``) and the task's head is picked by a one-hot
    mask, so the same code runs on any batch layout and under ``vmap``.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        num_tasks: int,
        hidden_sizes: list[int],
        multi_head: bool = False,
        log_std_min: float = -20.0,
        log_std_max: float = 2.0,
        generator: torch.Generator | None = None,
        init: str = "torch",
        layer_norm: bool = False,
    ) -> None:
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
        self.norms = _norm_parameters([[h] for h in hidden_sizes] if layer_norm else [])
        heads = num_tasks if multi_head else 1
        self.head_weight = nn.Parameter(torch.empty(sizes[-1], heads * 2 * action_dim))
        self.head_bias = nn.Parameter(torch.empty(heads * 2 * action_dim))
        for i in range(0, len(self.trunk), 2):
            _init_layer_(self.trunk[i], self.trunk[i + 1], sizes[i // 2], sizes[i // 2 + 1], init, generator)
        # a head's own fan-out is 2A: the T heads of a multi-head layer are T separate layers
        _init_layer_(self.head_weight, self.head_bias, sizes[-1], 2 * action_dim, init, generator)

    def trunk_parameter_names(self) -> list[str]:
        return [f"trunk.{i}" for i in range(len(self.trunk))] + [f"norms.{i}" for i in range(len(self.norms))]

    def forward(self, obs: torch.Tensor, task_onehot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [..., obs_dim]``, ``task_onehot`` broadcastable to ``[..., T]`` -> (mean, log_std) ``[..., A]``."""
        x = obs.reshape(-1, obs.shape[-1])  # one flat batch: addmm fuses the bias into the matmul
        for i in range(0, len(self.trunk), 2):
            x = torch.addmm(self.trunk[i + 1], x, self.trunk[i])
            if self.norms:
                x = layer_norm(x, self.norms[i], self.norms[i + 1])
            x = torch.relu(x)
        out = torch.addmm(self.head_bias, x, self.head_weight).reshape(*obs.shape[:-1], -1)
        if self.multi_head:
            out = out.unflatten(-1, (self.num_tasks, 2 * self.action_dim))
            out = (out * task_onehot.unsqueeze(-1)).sum(-2)
        mean, raw_log_std = out.chunk(2, dim=-1)
        # tanh-rescaled log-std bounds (as in mtrl / pytorch_sac) keep the gradient alive at the limits.
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw_log_std) + 1)
        return mean, log_std


def squashed_sample(
    mean: torch.Tensor, log_std: torch.Tensor, eps: torch.Tensor, log_prob_clamp: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reparameterised tanh-Gaussian sample ``a = tanh(mean + std * eps)`` and its log-density ``[...]``.

    ``log_prob_clamp=None``: the exact ``log(1 - tanh(u)^2)``, written stably. A number ε:
    mtrl's form ``log(max(1 - a^2, 0) + ε)`` computed from the squashed action ``a`` (mtrl uses
    ε = 1e-6), which caps each action dimension's Jacobian correction at ``-log ε`` (13.8 for
    1e-6) once ``a`` saturates; the exact form keeps growing linearly in ``|u|``.
    """
    u = mean + log_std.exp() * eps
    action = torch.tanh(u)
    gauss = -0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
    if log_prob_clamp is None:
        # log(1 - tanh(u)^2) written stably: 2 (log 2 - u - softplus(-2u)).
        jacobian = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
    else:
        jacobian = torch.log(torch.relu(1.0 - action.pow(2)) + log_prob_clamp)
    return action, (gauss - jacobian).sum(-1)


class TwinCriticEnsemble(nn.Module):
    """``num_q`` (=2) Q-networks per task, ``T * num_q`` MLPs evaluated as one batched matmul.

    Weights are stacked ``[T, num_q, in, out]`` (task axis first, so task t's twins are one
    contiguous slice). ``forward(obs, action)`` with task-grouped inputs ``[T, B, ...]``
    returns ``[T, num_q, B]``; with one task slice ``[B, ...]`` and that task's weights
    ``[num_q, in, out]`` (as ``vmap`` over tasks sees them) it returns ``[num_q, B]``.
    ``out_dim`` > 1 gives each Q-network that many outputs (a vector Q-value, e.g. one per
    objective): the shapes above gain a last axis ``[..., B, out_dim]``.
    No Python loop over tasks or twins.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        num_tasks: int,
        hidden_sizes: list[int],
        num_q: int = 2,
        generator: torch.Generator | None = None,
        init: str = "torch",
        layer_norm: bool = False,
        out_dim: int = 1,
    ) -> None:
        super().__init__()
        sizes = [obs_dim + action_dim, *hidden_sizes, out_dim]
        self.num_q, self.num_tasks = num_q, num_tasks
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = nn.Parameter(torch.empty(num_tasks, num_q, fan_in, fan_out))
            b = nn.Parameter(torch.empty(num_tasks, num_q, 1, fan_out))
            _init_layer_(w, b, fan_in, fan_out, init, generator)
            self.weights.append(w)
            self.biases.append(b)
        self.norms = _norm_parameters([[num_tasks, num_q, 1, h] for h in hidden_sizes] if layer_norm else [])

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.q_values([*self.weights], [*self.biases], obs, action, [*self.norms])

    @staticmethod
    def q_values(
        weights: list[torch.Tensor],
        biases: list[torch.Tensor],
        obs: torch.Tensor,
        action: torch.Tensor,
        norms: list[torch.Tensor] | tuple = (),
    ) -> torch.Tensor:
        """Q-values with explicit weights (``[(T,) num_q, in, out]``) for any matching input layout;
        ``norms``: each hidden layer's LayerNorm gain and shift, alternating (none: no LayerNorm)."""
        x = torch.cat([obs, action], dim=-1)
        # one shared critic ([1, num_q, ...]) on a task-grouped batch: the tasks fold into the batch
        # ([1, T * B, in]), else matmul would copy the weights once per task and sum T weight gradients
        tasks = x.shape[0] if weights[0].dim() == 4 and weights[0].shape[0] == 1 and x.dim() == 3 else None
        if tasks is not None:
            x = x.reshape(1, -1, x.shape[-1])
        # [(T,) num_q, B, in] @ [(T,) num_q, in, out]: one batched matmul over all members. The input is
        # expanded over the twins up front: from a broadcast, matmul returns a transposed layout that
        # the next layer (and, under vmap, the backward) copies
        lead = torch.broadcast_shapes((*x.shape[:-2], 1), weights[0].shape[:-2])
        x = x.unsqueeze(-3).expand(*lead, *x.shape[-2:])
        last = len(weights) - 1
        for i, (w, b) in enumerate(zip(weights, biases)):
            x = torch.matmul(x, w) + b
            if i < last:
                if norms:
                    x = layer_norm(x, norms[2 * i], norms[2 * i + 1])
                x = torch.relu(x)
        if tasks is not None:
            x = x.unflatten(-2, (tasks, -1)).squeeze(0).transpose(0, 1)  # [T, num_q, B, out]
        return x.squeeze(-1)  # one output: [..., B]

    def per_task_views(self) -> dict[str, torch.Tensor]:
        """The stacked weights by name (task axis first), as per-task inputs for ``vmap`` over tasks."""
        views = {f"critic.w{i}": w for i, w in enumerate(self.weights)}
        views.update({f"critic.b{i}": b for i, b in enumerate(self.biases)})
        views.update({f"critic.n{i}": n for i, n in enumerate(self.norms)})
        return views
