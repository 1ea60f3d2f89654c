"""Plain-Python call counters (schedules, warm-ups, periods): extra state, zeroed by ``reset()``."""


class CallCounters:
    """Aggregator mixin; ``_COUNTED`` maps extra-state keys to int attributes (no host read to branch on)."""

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
