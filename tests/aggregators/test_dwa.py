"""DWA (Liu et al., arXiv 1803.10704, Sec. 3.3) against the epoch rule of LibMTL / the authors'
mtan code transcribed here, and hand values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from morl.aggregators import build
from tests.loss_weighting_helpers import close, loss_sequence


def _dwa_reference(batches, per_epoch, temperature=2.0):
    """LibMTL/mtan: epoch averages in a buffer; epoch e > 1 uses K softmax(buf[e-1]/buf[e-2] / T)."""
    k = batches[0].shape[0]
    buffer, out = [], []
    for start in range(0, len(batches), per_epoch):
        epoch = len(buffer)
        chunk = [b.numpy() for b in batches[start : start + per_epoch]]
        for _ in chunk:
            if epoch > 1:
                r = buffer[epoch - 1] / buffer[epoch - 2] / temperature
                out.append(k * np.exp(r) / np.exp(r).sum())
            else:
                out.append(np.ones(k))
        buffer.append(np.mean(chunk, axis=0))
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("every", [1, 3])
def test_dwa_matches_the_epoch_rule(seed, every):
    gen = torch.Generator().manual_seed(seed)
    batches = loss_sequence(gen, 3 + seed % 3, 5 * every)
    agg = build("dwa", every=every)
    got = [agg.loss_weights(b) for b in batches]
    for g, r in zip(got, _dwa_reference(batches, every)):
        close(g, r)


def test_dwa_end_period_closes_an_epoch_like_every():
    """``every=0`` with :meth:`end_period` after each 4th call follows the epoch rule with 4
    batches per epoch."""
    gen = torch.Generator().manual_seed(7)
    batches = loss_sequence(gen, 4, 12)
    agg = build("dwa", every=0)
    for i, (b, r) in enumerate(zip(batches, _dwa_reference(batches, 4))):
        close(agg.loss_weights(b), r)
        if i % 4 == 3:
            agg.end_period()


def test_dwa_hand_values():
    agg = build("dwa")
    for losses in ([1.0, 1.0], [2.0, 1.0]):
        close(agg.loss_weights(torch.tensor(losses, dtype=torch.float64)), [1.0, 1.0])
    e = math.exp(0.5)  # r = (2, 1), r/T = (1, 0.5)
    close(agg.loss_weights(torch.ones(2, dtype=torch.float64)), [2 * e / (e + 1), 2 / (e + 1)])


def test_dwa_periods_of_different_lengths_use_their_means_and_an_empty_period_is_ignored():
    """``every=0`` with :meth:`end_period` after 2 calls, then after 3: L(t−2) and L(t−1) are
    each period's MEAN loss (the paper's epoch average), not its sum; closing a period with no
    call in it changes nothing. Period 1: (1, 2) twice, mean (1, 2); period 2: (3, 2), (3, 2),
    (3, 2), mean (3, 2): r = (3, 1), w = 2 softmax(r / 2)."""
    agg = build("dwa", every=0)
    for losses, calls in (([1.0, 2.0], 2), ([3.0, 2.0], 3)):
        for _ in range(calls):
            agg.loss_weights(torch.tensor(losses, dtype=torch.float64))
        agg.end_period()
        agg.end_period()  # empty: ignored
    e = math.exp(1.0)  # r/T = (1.5, 0.5): softmax = (e, 1) / (e + 1)
    close(agg.loss_weights(torch.ones(2, dtype=torch.float64)), [2 * e / (e + 1), 2 / (e + 1)])
