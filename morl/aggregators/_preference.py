"""The optional ``pref_vector`` option (TorchJD's name) shared by the projection methods."""

from __future__ import annotations

import torch


class PreferenceVector:
    """``pref_vector``: K finite weights ≥ 0 (not all 0) combining the rows, or None for the
    method's default (1/K or 1). Held on the host; its device copy is cached per
    (device, dtype), so a call never copies host→device."""

    def _init_preference(self, owner: str, pref_vector) -> None:
        self._owner = owner
        self._pref_on: tuple | None = None
        self.pref_vector = None
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
        key = (like.device, like.dtype)
        if self._pref_on is None or self._pref_on[0] != key:
            self._pref_on = (key, self.pref_vector.to(dtype=like.dtype, device=like.device))
        return self._pref_on[1]

    def _pref_repr(self) -> str:
        return "None" if self.pref_vector is None else str([round(v, 6) for v in self.pref_vector.tolist()])
