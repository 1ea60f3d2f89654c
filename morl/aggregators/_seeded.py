"""A seeded ``torch.Generator`` per device for the aggregators that draw random numbers: draws happen
where they are used (no host→device copy), and the generator states are extra state."""

import torch

from morl.aggregators._checks import check_number


class SeededDraws:
    """Mixin for an aggregator with a ``seed`` option: each device's generator starts at ``seed``."""

    def _init_seed(self, owner: str, seed: int) -> None:
        self.seed = check_number(owner, "seed", seed, integer=True)
        self.generators: dict[str, torch.Generator] = {}

    def reset(self) -> None:
        super().reset()
        self.generators = {}

    def get_extra_state(self) -> dict:
        return {"generators": {dev: g.get_state() for dev, g in self.generators.items()}}

    def set_extra_state(self, state: dict) -> None:
        if "generators" not in state:  # the layout before one path for every device
            state = {"generators": {"cpu": state["generator"], **state.get("device_generators", {})}}
        self.generators = {}
        for dev, gen_state in state["generators"].items():  # a state is a CPU ByteTensor, wherever loaded to
            self._generator_for(torch.device(dev)).set_state(gen_state.cpu())

    def _generator_for(self, device: torch.device) -> torch.Generator | None:
        if device.type == "meta":  # shapes only: nothing to draw
            return None
        key = str(device)
        if key not in self.generators:
            self.generators[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self.generators[key]
