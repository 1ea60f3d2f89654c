"""Plain-Python counters of the aggregators that count their calls (a schedule's position, a
warm-up, an update period): saved as the module's extra state, zeroed by ``reset()``."""

from __future__ import annotations


class CallCounters:
    """Mixin for an :class:`~morl.aggregators.base.Aggregator` whose counters are Python ints
    (reading a device counter to branch on it would be a host read per call). ``_COUNTED``
    maps each extra-state key to its attribute, so checkpoints keep their keys."""

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
