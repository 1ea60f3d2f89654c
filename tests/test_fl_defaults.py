"""FL defaults and option ranges that the mutation run (docs/testing.md) found unpinned."""

import pytest
import torch

from morl.agents.federated import client as C
from morl.agents.federated import strategies as S
from fl_fixtures import tiny_round


def test_all_clients_update_defaults_to_no_proximal_term():
    # FedAvg's client step: without prox_mu the update is the prox_mu = 0 one (benchmarks rely on it)
    model, thetas, tr, noise = tiny_round()
    d0, l0 = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, 0.1)
    d1, l1 = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, 0.1, 0.0)
    d2, _ = C.all_clients_update(model, thetas, tr.x, tr.y, tr.count, noise, 0.1, 1.0)
    assert torch.equal(d0, d1) and torch.equal(l0, l1) and not torch.equal(d0, d2)


@pytest.mark.parametrize("eps", [-0.1, 1.5])
def test_fedmgda_eps_outside_the_unit_interval_is_refused(eps):
    with pytest.raises(ValueError, match="eps"):
        S.FedMGDA(eps=eps)


def test_fedmgda_default_box_half_width():
    # the documented default ε = 0.5 (an ε ≥ 1 would make the box the whole simplex: plain MGDA)
    assert S.FedMGDA().eps == 0.5
