"""What every SAC agent here (MT-SAC, MO-SAC, conditioned MO-SAC) keeps besides its own parts:
the device counters of skipped updates, and the state of its networks, optimizers and temperature."""

from __future__ import annotations

from typing import Any

import torch

COUNTERS = ("nonfinite_updates", "nonfinite_streak", "nonfinite_longest")
PARTS = ("actor", "critic", "critic_target", "actor_opt", "critic_opt", "alpha_opt")


class SACState:
    """Mixin of an agent with ``actor``, ``critic``, ``critic_target``, their Adams ``*_opt`` and
    ``log_alpha``. The counters of updates skipped for NaN/inf (in total, in a row, the longest
    run) stay on the device: the loop reads them at its log and checkpoint points, never per update."""

    def _init_counters(self, device: torch.device) -> None:
        for name in COUNTERS:
            setattr(self, name, torch.zeros((), dtype=torch.int64, device=device))

    def _count_nonfinite(self, ok: torch.Tensor) -> dict[str, torch.Tensor]:
        """Count this update (``ok`` False: skipped); returns the counters an update reports."""
        bad = (~ok).to(torch.int64)
        self.nonfinite_updates += bad
        self.nonfinite_streak.add_(bad).mul_(bad)  # +1 on a skipped update, 0 on a taken one
        torch.maximum(self.nonfinite_longest, self.nonfinite_streak, out=self.nonfinite_longest)
        return {"nonfinite_updates": self.nonfinite_updates.clone(), "nonfinite_streak": self.nonfinite_streak.clone()}

    def _sac_state(self) -> dict[str, Any]:
        """Networks, target, optimizers, ``log_alpha`` and the counters."""
        state = {name: getattr(self, name).state_dict() for name in PARTS}
        return {
            **state,
            "log_alpha": self.log_alpha.detach().clone(),
            **{n: getattr(self, n).clone() for n in COUNTERS},
        }

    def _load_sac_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`_sac_state`; a checkpoint without the streak counters has no streak known."""
        for name in PARTS:
            getattr(self, name).load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        for opt in (self.actor_opt, self.critic_opt, self.alpha_opt):
            opt.param_bound = None  # new parameters: guarded_step measures max|θ| again
        for name in COUNTERS:
            getattr(self, name).copy_(state.get(name, torch.zeros((), dtype=torch.int64)))
