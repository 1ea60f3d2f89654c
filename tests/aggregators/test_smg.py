"""SMG (Liu & Vicente 2021): MGDA's min-norm weights of the stochastic gradients as they come,
checked by hand on a fixed matrix; its bias under noise (arXiv 2210.04158 §1.3) is checked
against MoCo in tests/aggregators/test_moco.py."""

import torch

from morl.aggregators import build


def test_smg_is_the_foot_of_the_perpendicular_on_the_segment():
    # segment (2,0)-(0,1): the foot of the perpendicular from 0 is 0.2·(2,0) + 0.8·(0,1)
    agg = build("smg")
    d = agg(torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64))
    torch.testing.assert_close(d, torch.tensor([0.4, 0.8], dtype=torch.float64))
    torch.testing.assert_close(agg.weights, torch.tensor([0.2, 0.8], dtype=torch.float64))


def test_smg_keeps_no_state_between_calls():
    agg = build("smg")
    first = agg(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64))
    torch.testing.assert_close(first, torch.full((3,), 1 / 3, dtype=torch.float64))
    assert all(v is None for k, v in agg.state_dict().items() if k != "not_converged")
