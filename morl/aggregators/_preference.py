"""Option vectors held on the host (TorchJD's ``pref_vector``, per-task constants), copied to
each device once, so a call never copies host→device."""

from __future__ import annotations

import torch


def on_device(cache: dict, values, like: torch.Tensor) -> torch.Tensor:
    """``values`` in ``like``'s dtype and device, copied on the first call for that pair."""
    key = (like.device, like.dtype)
    if key not in cache:
        cache[key] = torch.as_tensor(values, dtype=like.dtype).to(like.device)
    return cache[key]


class PreferenceVector:
    """``pref_vector``: K finite weights ≥ 0 (not all 0) combining the rows, or None for the
    method's default (1/K or 1)."""

    def _init_preference(self, owner: str, pref_vector) -> None:
        self._owner, self._pref_on, self.pref_vector = owner, {}, None
        if pref_vector is not None:
            p = torch.as_tensor(pref_vector, dtype=torch.float64).detach().cpu().reshape(-1)
            if p.numel() < 1 or not bool(torch.isfinite(p).all()) or not bool((p >= 0).all()) or not bool((p > 0).any()):
                raise ValueError(f"{owner} option pref_vector={pref_vector!r} is not valid; allowed: None or K >= 1 finite numbers >= 0, not all 0")
            self.pref_vector = p

    def _preference(self, k: int, like: torch.Tensor, default: float | None) -> torch.Tensor:
        """[K] preference in ``like``'s dtype and device; ``default`` None means 1/K."""
        if self.pref_vector is None:
            return torch.full((k,), 1.0 / k if default is None else default, dtype=like.dtype, device=like.device)
        if self.pref_vector.shape[0] != k:
            raise ValueError(f"{self._owner} pref_vector has {self.pref_vector.shape[0]} entries but got K={k} objectives")
        return on_device(self._pref_on, self.pref_vector, like)

    def _pref_repr(self) -> str:
        return "None" if self.pref_vector is None else str([round(v, 6) for v in self.pref_vector.tolist()])
