"""Plain-Python call counters (schedules, warm-ups, periods): extra state, zeroed by ``reset()``."""

from __future__ import annotations


class CallCounters:
    """Aggregator mixin; ``_COUNTED`` maps each extra-state key to its int attribute (a device
    counter would cost a host read to branch on)."""

    _COUNTED: dict[str, str] = {}

    def reset(self) -> None:
        super().reset()
        for attribute in self._COUNTED.values():
            setattr(self, attribute, 0)

    def get_extra_state(self) -> dict:
        return {key: getattr(self, attribute) for key, attribute in self._COUNTED.items()}

    def set_extra_state(self, state: dict) -> None:
        for key, attribute in self._COUNTED.items():
            setattr(self, attribute, int(state[key]))
