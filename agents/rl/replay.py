"""A replay buffer with one ring per task that samples the same number of transitions per task."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

FIELDS = ("obs", "action", "reward", "next_obs", "terminated")


class MultiTaskReplay:
    """Per-task ring buffers preallocated on the agent's device as ``[T, capacity, ...]``.

    ``add`` writes a vector-env step (any number of transitions, any tasks) with one indexed
    store per field; write positions are computed on the host from the task ids, so neither
    ``add`` nor ``sample`` reads anything back from the device. ``sample(per_task)`` returns
    ``[T, per_task, ...]`` tensors, row ``t`` drawn uniformly from task ``t``'s stored data.
    ``reward_dim`` M stores vector rewards ``[T, capacity, M]`` (multi-objective envs); None
    stores one reward per transition.
    Sampling before every task has data is the caller's mistake (``len(buffer)`` is the
    minimum over tasks; check it against the warm-up).
    """

    def __init__(
        self,
        num_tasks: int,
        capacity_per_task: int,
        obs_dim: int,
        action_dim: int,
        device: torch.device | str = "cpu",
        reward_dim: int | None = None,
    ) -> None:
        if num_tasks < 1 or capacity_per_task < 1:
            raise ValueError(f"num_tasks and capacity_per_task must be >= 1, got {num_tasks} and {capacity_per_task}")
        if reward_dim is not None and reward_dim < 1:
            raise ValueError(f"reward_dim must be >= 1 (objectives) or None (one reward), got {reward_dim}")
        self.num_tasks, self.capacity = int(num_tasks), int(capacity_per_task)
        self.reward_dim = None if reward_dim is None else int(reward_dim)
        self.obs_dim, self.action_dim = int(obs_dim), int(action_dim)
        self.device = torch.device(device)
        shape = (self.num_tasks, self.capacity)
        self.storage = {
            "obs": torch.zeros(*shape, obs_dim, device=self.device),
            "action": torch.zeros(*shape, action_dim, device=self.device),
            "reward": torch.zeros(*shape, *(() if reward_dim is None else (reward_dim,)), device=self.device),
            "next_obs": torch.zeros(*shape, obs_dim, device=self.device),
            "terminated": torch.zeros(*shape, device=self.device),
        }
        self._ptr = np.zeros(self.num_tasks, dtype=np.int64)  # next write position per task (host)
        self._size = np.zeros(self.num_tasks, dtype=np.int64)  # stored transitions per task (host)
        self._size_dev = torch.zeros(self.num_tasks, device=self.device)

    def add(self, task_ids, obs, action, reward, next_obs, terminated) -> None:
        """Store ``N`` transitions (numpy arrays or tensors with leading ``[N]``)."""
        tasks = np.asarray(task_ids.cpu() if isinstance(task_ids, torch.Tensor) else task_ids, dtype=np.int64).reshape(
            -1
        )
        if tasks.size == 0:
            return
        if tasks.min() < 0 or tasks.max() >= self.num_tasks:
            raise ValueError(f"task ids must lie in [0, {self.num_tasks}), got range [{tasks.min()}, {tasks.max()}]")
        # rank of each transition among those of its own task in this call -> consecutive slots
        order = np.argsort(tasks, kind="stable")
        counts = np.bincount(tasks, minlength=self.num_tasks)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty_like(tasks)
        rank[order] = np.arange(tasks.size) - starts[tasks[order]]
        pos = (self._ptr[tasks] + rank) % self.capacity
        t_idx = torch.as_tensor(tasks, device=self.device)
        p_idx = torch.as_tensor(pos, device=self.device)
        for name, value in zip(FIELDS, (obs, action, reward, next_obs, terminated)):
            dest = self.storage[name]
            value = torch.as_tensor(value, device=self.device).to(dest.dtype).reshape(tasks.size, *dest.shape[2:])
            dest[t_idx, p_idx] = value
        self._ptr = (self._ptr + counts) % self.capacity
        self._size = np.minimum(self._size + counts, self.capacity)
        self._size_dev = torch.as_tensor(self._size, dtype=torch.float32).to(self.device, non_blocking=True)

    def sample(self, per_task: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """``per_task`` transitions of every task, uniform within each task: ``[T, per_task, ...]``."""
        # draw on the generator's own device (a CPU generator may drive a CUDA buffer)
        u = torch.rand(self.num_tasks, per_task, device=generator.device, generator=generator).to(self.device)
        idx = (u * self._size_dev.unsqueeze(1)).long().clamp_max_(self.capacity - 1)
        rows = torch.arange(self.num_tasks, device=self.device).unsqueeze(1)
        return {name: t[rows, idx] for name, t in self.storage.items()}

    def sizes(self) -> torch.Tensor:
        """Stored transitions per task, ``[T]`` (a CPU tensor: it is tracked on the host)."""
        return torch.as_tensor(self._size.copy())

    def __len__(self) -> int:
        return int(self._size.min())

    def state_dict(self) -> dict[str, Any]:
        """The stored contents (up to the largest task size), sizes and write pointers, on CPU."""
        n = int(self._size.max())
        return {
            "num_tasks": self.num_tasks,
            "capacity": self.capacity,
            "obs_dim": self.obs_dim,
            "action_dim": self.action_dim,
            "reward_dim": self.reward_dim,
            "data": {k: v[:, :n].cpu().clone() for k, v in self.storage.items()},
            "size": self._size.copy(),
            "ptr": self._ptr.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("num_tasks", "obs_dim", "action_dim", "reward_dim"):
            if state.get(key) != getattr(self, key):
                raise ValueError(f"replay state has {key}={state[key]}, this buffer has {getattr(self, key)}")
        n = int(np.max(state["size"]))
        if n > self.capacity:
            raise ValueError(
                f"replay state holds {n} transitions per task, more than capacity_per_task={self.capacity}"
            )
        if state["capacity"] != self.capacity and np.any(np.asarray(state["size"]) == state["capacity"]):
            raise ValueError(
                f"a full replay ring of capacity {state['capacity']} cannot be restored into capacity {self.capacity}"
            )
        for k, v in self.storage.items():
            v.zero_()
            v[:, :n] = state["data"][k].to(self.device)
        self._size = np.asarray(state["size"], dtype=np.int64).copy()
        self._ptr = np.asarray(state["ptr"], dtype=np.int64).copy() % self.capacity
        self._size_dev = torch.as_tensor(self._size, dtype=torch.float32).to(self.device)
