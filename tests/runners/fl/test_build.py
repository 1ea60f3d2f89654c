"""`morl fl` builds the robust strategies from the config and refuses too few clients."""

import pytest

from morl.agents.federated import strategies as S
from morl.runners.fl.build import build_strategy
from morl.runners.fl.config import FLConfig


def test_config_wiring_and_validation():
    cfg = FLConfig()
    cfg.strategy.name, cfg.strategy.n_byzantine = "krum", 2
    assert isinstance(build_strategy(cfg, 7), S.Robust)
    with pytest.raises(ValueError, match="krum with n_byzantine=2 needs at least 7 clients, got 6"):
        build_strategy(cfg, 6)
    cfg.strategy.name = "trimmed_mean"
    assert build_strategy(cfg, 5).aggregator.trim == 2
    with pytest.raises(ValueError, match="needs at least 5 clients"):
        build_strategy(cfg, 4)
