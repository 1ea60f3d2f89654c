"""A seeded ``torch.Generator`` per device for the aggregators that draw random numbers: draws happen
where they are used (no host→device copy), and the generator states are extra state."""

import torch

from morl.aggregators._checks import check_number


class SeededDraws:
    """Mixin for an aggregator with a ``seed`` option."""

    def _init_seed(self, owner: str, seed: int) -> None:
        self.seed = check_number(owner, "seed", seed, integer=True)
        self.generator = torch.Generator().manual_seed(seed)
        self._device_generators: dict[str, torch.Generator] = {}

    def reset(self) -> None:
        super().reset()
        self.generator.manual_seed(self.seed)
        self._device_generators = {}

    def get_extra_state(self) -> dict:
        return {
            "generator": self.generator.get_state(),
            "device_generators": {dev: g.get_state() for dev, g in self._device_generators.items()},
        }

    def set_extra_state(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
        self._device_generators = {}
        for dev, gen_state in state.get("device_generators", {}).items():
            self._generator_for(torch.device(dev)).set_state(gen_state)

    def _generator_for(self, device: torch.device) -> torch.Generator | None:
        if device.type == "cpu":
            return self.generator
        if device.type == "meta":  # shapes only: nothing to draw
            return None
        key = str(device)
        if key not in self._device_generators:
            self._device_generators[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self._device_generators[key]
