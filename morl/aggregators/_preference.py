"""Option vectors held on the host (TorchJD's ``pref_vector``, per-task constants), copied to
each device once, so a call never copies host→device."""

import torch


def on_device(cache: dict, values, like: torch.Tensor) -> torch.Tensor:
    """``values`` in ``like``'s dtype and device, copied on the first call for that pair."""
    key = (like.device, like.dtype)
    if key not in cache:
        cache[key] = torch.as_tensor(values, dtype=like.dtype).to(like.device)
    return cache[key]


class PreferenceVector:
    """The option named ``_PREF``: K finite weights ≥ 0, not all 0 (> 0 each when ``strict``),
    or None for 1/K each."""

    _PREF = "pref_vector"

    def _init_preference(self, value, strict: bool = False) -> None:
        self._pref_on, self._pref_strict, p = {}, strict, None
        if value is not None:
            p = torch.as_tensor(value, dtype=torch.float64).detach().cpu().reshape(-1)
            signs = (p > 0).all() if strict else (p >= 0).all() & (p > 0).any()
            if p.numel() < 1 or not bool(torch.isfinite(p).all() & signs):
                allowed = "> 0 each" if strict else ">= 0, not all 0"
                raise ValueError(
                    f"{type(self).__name__} option {self._PREF}={value!r} is not valid; allowed: None or K >= 1 finite numbers {allowed}"
                )
        setattr(self, self._PREF, p)

    def set_preference(self, value) -> None:
        """Replace the preference, checked as at construction (the next call copies it to the device)."""
        self._init_preference(value, self._pref_strict)

    def _preference(self, k: int, like: torch.Tensor) -> torch.Tensor:
        """[K] preference in ``like``'s dtype and device; None means 1/K each."""
        p = getattr(self, self._PREF)
        if p is None:
            return torch.full((k,), 1.0 / k, dtype=like.dtype, device=like.device)
        if p.shape[0] != k:
            raise ValueError(f"{type(self).__name__} {self._PREF} has {p.shape[0]} entries but got K={k} objectives")
        return on_device(self._pref_on, p, like)
