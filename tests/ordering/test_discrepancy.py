"""The discrepancy measures (morl/ordering/discrepancy.py) by hand, and GraB's reordering lemma
checked with them on random signs."""

import torch

from morl.ordering import combined_discrepancy, herding, signed_prefix_discrepancy


def test_reorder_lemma_holds_per_objective():
    # max_j ‖prefix_j(π')‖∞ <= ½(max‖S_k‖∞ + max‖D_k‖∞) + ‖S_K‖∞ for any signs (the reordering lemma behind GraB).
    gen = torch.Generator().manual_seed(11)
    for trial in range(50):
        K, d = 16 + trial, 3
        z = torch.randn(K, d, generator=gen, dtype=torch.float64)
        signs = torch.rand(K, generator=gen) < 0.5
        new = torch.cat([torch.arange(K)[signs], torch.arange(K)[~signs].flip(0)])
        lhs = z[new].cumsum(0).abs().amax()
        S = z.cumsum(0)
        rhs = 0.5 * (S.abs().amax() + signed_prefix_discrepancy(z, signs)) + S[-1].abs().amax()
        assert lhs <= rhs + 1e-9


def test_herding_by_hand():
    """z = (3, 1, −1, −3), mean 0: in this order the prefix sums are 3, 4, 3, 0 (H = 4); in the
    order (0, 3, 1, 2) they are 3, 0, 1, 0 (H = 3). A shift of every z_k changes nothing."""
    z = torch.tensor([[3.0], [1.0], [-1.0], [-3.0]])
    assert herding(torch.tensor([0, 1, 2, 3]), z).item() == 4.0
    assert herding(torch.tensor([0, 3, 1, 2]), z).item() == 3.0
    assert herding(torch.tensor([0, 3, 1, 2]), z + 10.0).item() == 3.0


def test_combined_discrepancy_sums_the_objectives_before_the_prefix():
    """Two objectives with z = (3, 1, −1, −3), one in order, one reversed: every summed prefix
    is 0 although each objective alone has H = 4."""
    z = torch.tensor([[3.0], [1.0], [-1.0], [-3.0]])
    grads = torch.stack([z, z])
    orders = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]])
    assert combined_discrepancy(orders, grads).item() == 0.0
    assert combined_discrepancy(orders[:1], grads[:1]).item() == herding(orders[0], z).item() == 4.0


def test_signed_prefix_discrepancy_by_hand():
    z = torch.tensor([[1.0, 0.0], [2.0, -1.0], [3.0, 0.5]])
    # prefixes: (1, 0), (−1, 1), (2, 1.5)
    assert signed_prefix_discrepancy(z, torch.tensor([True, False, True])).item() == 2.0
